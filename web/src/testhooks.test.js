// Unit tests of the test hooks' transcript: `npm test`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Transcript, TESTING } from './testhooks.js';

test('a transcript keeps the newest bytes and decodes them as one stream', () => {
  const t = new Transcript(7);
  const euro = new TextEncoder().encode('€'); // 3 bytes, split across chunks
  t.add(new TextEncoder().encode('abcd'));
  t.add(euro.subarray(0, 1));
  t.add(euro.subarray(1));
  assert.equal(t.text(), 'abcd€');
  t.add(new TextEncoder().encode('0123456789'));
  assert.equal(t.text(), '3456789');
  assert.equal(TESTING, false, 'node is not a browser under automation');
});
