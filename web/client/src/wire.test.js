// Unit tests of the wire module: `npm test`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeOutput, encodeInput, FATAL_ERRORS, INPUT_REFUSED_ERRORS } from './wire.js';
import { outputFrame } from './wiretest.js';


test('frames', () => {
  const f = decodeOutput(outputFrame(7, 9, 1, 100, new Uint8Array([0xe2, 0x82])));
  assert.deepEqual({ ...f, data: [...f.data] }, { channel: 7, seq: 9, stream: 1, offset: 100, data: [0xe2, 0x82] });
  assert.throws(() => decodeOutput(outputFrame(7, 9, 1, 0, new Uint8Array(3), 5)));
  assert.throws(() => decodeOutput(new Uint8Array([1, 0, 0]).buffer));
  const in1 = encodeInput(3, 258, new Uint8Array([65]));
  assert.deepEqual([...in1], [2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 1, 2, 65]);
});

test('code lists are sorted, unique and disjoint', () => {
  for (const list of [FATAL_ERRORS, INPUT_REFUSED_ERRORS]) {
    assert.deepEqual([...list], [...new Set(list)].sort());
  }
  assert.equal(FATAL_ERRORS.some((c) => INPUT_REFUSED_ERRORS.includes(c)), false);
  assert.equal(FATAL_ERRORS.includes('failed'), false, 'the server never sends failed');
});
