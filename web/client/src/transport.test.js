// Unit tests of the transport module: `npm test`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { backoffDelay } from './transport.js';

test('backoff: full jitter up to 250 ms doubling to 10 s', () => {
  assert.equal(backoffDelay(0, 250, 10000, () => 0.999), 249);
  assert.equal(backoffDelay(2, 250, 10000, () => 0.999), 999);
  assert.equal(backoffDelay(20, 250, 10000, () => 0.999), 9990);
  assert.equal(backoffDelay(5, 250, 10000, () => 0), 0);
});
