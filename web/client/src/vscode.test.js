import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Emitter } from './emitter.js';
import { createPseudoterminal, TitleScanner } from './vscode.js';

/** standIn is what vscode.EventEmitter offers, for the adapter. */
function standIn() {
  const listeners = new Set();
  return {
    event: (fn) => { listeners.add(fn); return { dispose: () => listeners.delete(fn) }; },
    fire: (v) => { for (const fn of listeners) fn(v); },
    dispose: () => listeners.clear(),
  };
}

/** fakeClient hands out fake executions and records what was asked. */
function fakeClient() {
  const asked = [];
  const ex = Object.assign(new Emitter(), { written: [], sizes: [], detached: false, cancelled: false });
  ex.write = (d) => ex.written.push(d);
  ex.resize = (r, c) => ex.sizes.push([r, c]);
  ex.detach = () => { ex.detached = true; };
  ex.cancel = () => { ex.cancelled = true; };
  return {
    ex, asked,
    start: (spec) => { asked.push(['start', spec]); return ex; },
    attach: (id, opts) => { asked.push(['attach', id, opts]); return ex; },
  };
}

test('a started terminal: its size, output decoded across chunks, titles, input, resize and exit', () => {
  const client = fakeClient();
  const pty = createPseudoterminal({ client, makeEmitter: standIn, start: { command: 'bash' } });
  const out = [], names = [], codes = [];
  pty.onDidWrite((s) => out.push(s));
  pty.onDidChangeName((s) => names.push(s));
  pty.onDidClose((c) => codes.push(c));
  pty.open({ columns: 100, rows: 30 });
  assert.deepEqual(client.asked[0], ['start', { command: 'bash', pty: { rows: 30, cols: 100 }, snapshot: true }]);
  const e = new TextEncoder().encode('é\x1b]0;build: o');
  client.ex._emit('output', e.slice(0, 1));
  client.ex._emit('output', e.slice(1));
  client.ex._emit('output', new TextEncoder().encode('k\x07$ '));
  assert.equal(out.join(''), 'é\x1b]0;build: ok\x07$ ');
  assert.deepEqual(names, ['build: ok']);
  pty.handleInput('ls\r');
  pty.setDimensions({ columns: 120, rows: 40 });
  assert.deepEqual(client.ex.written, ['ls\r']);
  assert.deepEqual(client.ex.sizes, [[40, 120]]);
  client.ex._emit('exit', { code: 3 });
  assert.deepEqual(codes, [3]);
  pty.handleInput('ignored');
  assert.deepEqual(client.ex.written, ['ls\r']);
});

test('a reattach after a reload shows the screen, then what follows; close detaches', () => {
  const client = fakeClient();
  const ids = [];
  const pty = createPseudoterminal({ client, makeEmitter: standIn, id: 'vs-1', onExecution: (id) => ids.push(id) });
  const out = [];
  pty.onDidWrite((s) => out.push(s));
  pty.open({ columns: 80, rows: 24 });
  assert.deepEqual(client.asked[0], ['attach', 'vs-1', { snapshot: true }]);
  client.ex._emit('attached', { id: 'vs-1' });
  client.ex._emit('snapshot', { data: '$ make\r\nok\r\n$ ', rows: 24, cols: 80 });
  client.ex._emit('output', new TextEncoder().encode('next'));
  assert.equal(out.join(''), '\x1bc$ make\r\nok\r\n$ next');
  assert.deepEqual(ids, ['vs-1']);
  pty.close();
  assert.ok(client.ex.detached && !client.ex.cancelled);
});

test('titles are found whole across chunks, with either terminator', () => {
  const got = [];
  const s = new TitleScanner((t) => got.push(t));
  for (const chunk of ['a\x1b', ']2;one\x1b', '\\b\x1b]0;', 'two\x07', 'plain']) s.scan(chunk);
  assert.deepEqual(got, ['one', 'two']);
});
