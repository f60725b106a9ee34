// Unit tests of the recording download's API side: `npm test`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ExecutionsAPI, ExecutionsError, rows } from './executions.js';

test('the API fetches a recording with the token', async () => {
  /** @type {{url: string, init: any}[]} */
  const calls = [];
  const cast = new Blob(['{"version":2}\n']);
  const api = new ExecutionsAPI(() => 'tok', /** @type {any} */ (async (/** @type {string} */ url, /** @type {any} */ init) => {
    calls.push({ url, init });
    return { ok: true, status: 200, blob: async () => cast };
  }));
  assert.equal(await api.recording('web-1:x'), cast);
  assert.deepEqual(calls.map((c) => [c.init.method, c.url, c.init.headers.Authorization]), [
    ['GET', '/v1/executions/web-1%3Ax/recording', 'Bearer tok'],
  ]);
});

test('a missing recording is an error with its code', async () => {
  const api = new ExecutionsAPI(() => 'tok', /** @type {any} */ (async () => ({
    ok: false, status: 404, json: async () => ({ error: 'not_found', message: 'the execution has no recording' }),
  })));
  await assert.rejects(api.recording('a'), (/** @type {any} */ e) => e instanceof ExecutionsError && e.status === 404 && e.code === 'not_found');
});

test('rows say which executions are recorded', () => {
  const r = rows([{ id: 'a', status: 'running', recorded: true }, { id: 'b', status: 'exited' }], () => '');
  assert.deepEqual(r.map((x) => [x.id, x.recorded]), [['a', true], ['b', false]]);
});
