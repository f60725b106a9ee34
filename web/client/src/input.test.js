// Unit tests of the input queue with a recording sink: `npm test`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InputQueue } from './input.js';

const tick = (ms = 5) => new Promise((r) => setTimeout(r, ms));

/** recorder returns a sink that records what the queue sends. */
function recorder() {
  const sent = [];
  const lost = [];
  const sink = {
    frame: (offset, data) => sent.push([offset, new TextDecoder().decode(data)]),
    closeStdin: (offset) => sent.push(['close', offset]),
    lost: (n) => lost.push(n),
  };
  return { sink, sent, lost };
}

test('input written offline goes out on resume, from what the gateway has', () => {
  const { sink, sent } = recorder();
  const q = new InputQueue(1 << 20, sink);
  assert.equal(q.write(new TextEncoder().encode('abc')), true);
  assert.deepEqual(sent, []);
  q.resume(1);
  assert.deepEqual(sent, [[1, 'bc']]);
  q.stop();
});

test('input the gateway lacks and no longer keeps is reported lost; the rest follows what it has', async () => {
  const { sink, sent, lost } = recorder();
  const q = new InputQueue(16 << 10, sink);
  q.resume(0);
  q.write(new Uint8Array(16 << 10).fill(97));
  await tick(30); // the pacing gap
  q.write(new TextEncoder().encode('b')); // the sent 16 KiB are dropped: over the bound
  assert.deepEqual(sent.map(([o]) => o), [0, 16 << 10]);
  q.pause();
  q.resume(100);
  assert.deepEqual(lost, [(16 << 10) - 100]);
  assert.deepEqual(sent.at(-1), [100, 'b']);
  assert.equal(q.write(new Uint8Array((16 << 10) + 1)), false, 'more unsent input than the bound');
  q.stop();
});

test('close-stdin goes out after the last input, and again after a reattach', async () => {
  const { sink, sent } = recorder();
  const q = new InputQueue(1 << 20, sink);
  q.resume(0);
  q.write(new TextEncoder().encode('x'));
  q.closeStdin();
  assert.deepEqual(sent, [[0, 'x']], 'close-stdin waits for the pacing gap');
  await tick(50);
  assert.deepEqual(sent, [[0, 'x'], ['close', 1]]);
  q.pause();
  q.resume(1);
  assert.deepEqual(sent.at(-1), ['close', 1]);
  q.stop();
});
