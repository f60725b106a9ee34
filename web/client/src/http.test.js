import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TermgateHTTP, TermgateError } from './http.js';

/** fakeFetch answers each call from answers, in turn, and records it. */
function fakeFetch(answers) {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url, init, body: init.body ? JSON.parse(new TextDecoder().decode(init.body)) : undefined });
    const a = answers.shift();
    if (a instanceof Error) throw a;
    return new Response(JSON.stringify(a.body), { status: a.status, headers: { 'Content-Type': 'application/json' } });
  };
  return { fetch, calls };
}

test('exec names a start, so that a retry finds it; it retries what did not arrive and unavailable', async () => {
  const { fetch, calls } = fakeFetch([
    new TypeError('fetch failed'),
    { status: 503, body: { error: 'unavailable', message: 'node n1 is not answering' } },
    { status: 201, body: { id: 'x-1', running: false, output: 'hi\n' } },
  ]);
  const api = new TermgateHTTP({ url: 'http://127.0.0.1:1/', getToken: () => 'tok', fetch });
  const res = await api.exec({ command: 'echo hi' });
  assert.equal(res.output, 'hi\n');
  assert.equal(calls.length, 3);
  assert.match(calls[0].body.id, /^x-[0-9a-f]{20}$/);
  assert.ok(calls.every((c) => c.body.id === calls[0].body.id), 'every try carries the same id');
  assert.equal(calls[0].url, 'http://127.0.0.1:1/v1/exec');
  assert.equal(calls[0].init.headers.Authorization, 'Bearer tok');
});

test('a refusal is a TermgateError with the gateway code; it is not retried', async () => {
  const { fetch, calls } = fakeFetch([{ status: 404, body: { error: 'not_found', message: 'no such execution' } }]);
  const api = new TermgateHTTP({ url: 'http://127.0.0.1:1', getToken: () => 'tok', fetch });
  await assert.rejects(api.write('a b', { input: 'x', offset: 0 }), (err) => {
    assert.ok(err instanceof TermgateError);
    assert.equal(err.code, 'not_found');
    assert.equal(err.status, 404);
    return true;
  });
  assert.equal(calls.length, 1);
  assert.equal(calls[0].url, 'http://127.0.0.1:1/v1/executions/a%20b/write');
});

test('files paths are percent-encoded name by name; no token is unauthorized', async () => {
  const { fetch, calls } = fakeFetch([{ status: 200, body: { entries: [] } }]);
  const api = new TermgateHTTP({ url: 'http://127.0.0.1:1', getToken: () => 'tok', fetch });
  await api.listFiles('/src/a b#c', { id: 'run-1' });
  assert.equal(calls[0].url, 'http://127.0.0.1:1/v1/executions/run-1/files/src/a%20b%23c/');
  const none = new TermgateHTTP({ url: 'http://127.0.0.1:1', getToken: () => null, fetch });
  await assert.rejects(none.list(), (err) => err.code === 'unauthorized');
  assert.throws(() => new TermgateHTTP({ url: 'ws://x', getToken: () => 't' }), /must start with http/);
});

test('a write without an offset is not sent again: the retry could write it twice', async () => {
  const { fetch, calls } = fakeFetch([new TypeError('fetch failed'), { status: 200, body: {} }]);
  const api = new TermgateHTTP({ url: 'http://127.0.0.1:1', getToken: () => 'tok', fetch });
  await assert.rejects(api.write('a', { input: 'x' }), /fetch failed/);
  assert.equal(calls.length, 1);
});
