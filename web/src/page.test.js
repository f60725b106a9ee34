// Unit tests of the page's modules without a DOM (executions, prefs,
// notices): `npm test`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ExecutionsAPI, ExecutionsError, partialText, rows, startedText } from './executions.js';
import { Flag, Titles, TITLES_MAX } from './prefs.js';
import { noticeLine, noticeText, plain, connectionText, endedText } from './notices.js';

/** memoryStore is a Storage kept in a Map. */
function memoryStore() {
  const m = new Map();
  return {
    /** @param {string} k */ getItem: (k) => m.get(k) ?? null,
    /** @param {string} k @param {string} v */ setItem: (k, v) => { m.set(k, String(v)); },
    /** @param {string} k */ removeItem: (k) => { m.delete(k); },
  };
}

/**
 * fakeFetch answers every request with status and body, recording them.
 * @param {number} status
 * @param {unknown} body
 */
function fakeFetch(status, body) {
  /** @type {{url: string, init: any}[]} */
  const calls = [];
  const fn = /** @type {any} */ (async (/** @type {string} */ url, /** @type {any} */ init) => {
    calls.push({ url, init });
    return { ok: status < 300, status, json: async () => body };
  });
  return { fn, calls };
}

test('the API sends the token as a bearer and reads the list', async () => {
  const f = fakeFetch(200, { executions: [{ id: 'a', status: 'running' }] });
  const api = new ExecutionsAPI(() => 'tok', f.fn);
  assert.deepEqual(await api.list(), [{ id: 'a', status: 'running' }]);
  await api.cancel('web-1:x');
  assert.deepEqual(f.calls.map((c) => [c.init.method, c.url, c.init.headers.Authorization]), [
    ['GET', '/v1/executions', 'Bearer tok'],
    ['POST', '/v1/executions/web-1%3Ax/cancel', 'Bearer tok'],
  ]);
});

test('the API turns refusals into errors with their code', async () => {
  const api = new ExecutionsAPI(() => 'tok', fakeFetch(409, { error: 'not_running', message: 'it ended' }).fn);
  await assert.rejects(api.cancel('a'), (/** @type {any} */ e) => e instanceof ExecutionsError && e.status === 409 && e.code === 'not_running' && e.message === 'it ended');
  const none = new ExecutionsAPI(() => null, fakeFetch(200, {}).fn);
  await assert.rejects(none.list(), (/** @type {any} */ e) => e.status === 401);
  const html = new ExecutionsAPI(() => 't', /** @type {any} */ (async () => ({ ok: false, status: 502, json: async () => { throw new SyntaxError('html'); } })));
  await assert.rejects(html.list(), /the gateway answered 502/);
});

test('rows put running ones first, newest first, with the titles seen', () => {
  const list = [
    { id: 'old', status: 'running', pty: true, started: '2026-01-01T10:00:00Z' },
    { id: 'done', status: 'timed_out', started: '2026-01-01T12:00:00Z' },
    { id: 'new', status: 'running', pty: true, started: '2026-01-01T11:00:00Z', title: 'vim \u001b]0;x' },
    /** @type {any} */ ({ status: 'running' }),
  ];
  const r = rows(list, (id) => (id === 'old' ? 'bash in /work' : ''));
  assert.deepEqual(r.map((x) => [x.id, x.title, x.status, x.running]), [
    ['new', 'vim ]0;x', 'running', true],
    ['old', 'bash in /work', 'running', true],
    ['done', '', 'timed out', false],
  ]);
  assert.equal(startedText(undefined), '');
  assert.equal(startedText('nonsense'), '');
  assert.match(startedText('2026-01-01T10:00:00Z', new Date('2026-06-01T10:00:00Z')), /\d/);
});

test('titles are kept per identity and bounded', () => {
  const t = new Titles(memoryStore(), 'titles');
  t.set('acme', 'a', 'one');
  t.set('evil', 'a', 'other');
  assert.equal(t.get('acme', 'a'), 'one');
  assert.equal(t.get('evil', 'a'), 'other');
  assert.equal(t.get('acme', 'b'), '');
  for (let i = 0; i < TITLES_MAX + 5; i++) t.set('acme', `x${i}`, `t${i}`);
  assert.equal(t.load().length, TITLES_MAX);
  assert.equal(t.get('acme', 'a'), '', 'the oldest went');
  assert.equal(t.get('acme', `x${TITLES_MAX + 4}`), `t${TITLES_MAX + 4}`);
  t.set('acme', 'x104', '');
  assert.equal(t.get('acme', 'x104'), '');
  const broken = memoryStore();
  broken.setItem('titles', '{not json');
  assert.equal(new Titles(broken, 'titles').get('acme', 'a'), '');
});

test('a flag is kept in storage', () => {
  const s = memoryStore();
  const f = new Flag(s, 'copy');
  assert.equal(f.get(), false);
  f.set(true);
  assert.equal(new Flag(s, 'copy').get(), true);
  f.set(false);
  assert.equal(s.getItem('copy'), null);
});

test('notices are plain text on a line of their own', () => {
  assert.equal(plain('a\u001b[2Jb\u009b\r\nc'), 'a [2Jb   c');
  assert.equal(noticeText({ reason: 'idle_timeout' }), 'idle timeout');
  assert.equal(noticeText({}), 'notice from the gateway');
  const at = '2026-01-01T10:00:00Z';
  assert.equal(noticeText({ reason: 'idle_timeout', message: 'stopped soon', at }), `stopped soon (at ${new Date(at).toLocaleTimeString()})`);
  assert.equal(noticeText({ message: 'x', at: 'never' }), 'x');
  const line = noticeLine({ message: 'evil \u001b]0;pwned\u0007 title' });
  assert.equal(line, '\r\n\x1b[33m[termgate: evil  ]0;pwned  title]\x1b[0m\r\n');
  assert.equal(plain('x'.repeat(600)).length, 500);
});

test('the status line tells a restart from a lost connection', () => {
  assert.equal(connectionText({ state: 'reconnecting', restart: true }, 3), 'the server restarted; reconnecting in 3 s');
  assert.equal(connectionText({ state: 'connecting', restart: true }), 'the server restarted; reconnecting');
  assert.equal(connectionText({ state: 'reconnecting' }, 2), 'connection lost; reconnecting in 2 s');
  assert.equal(connectionText({ state: 'connecting', lost: true }), 'connection lost; reconnecting');
  assert.equal(connectionText({ state: 'connecting' }), 'connecting');
});

test('an execution the restarted server no longer has says so', () => {
  assert.equal(endedText('gone'), 'ended: gone (the server restarted without this execution)');
  assert.equal(endedText('not_found'), 'ended: not_found');
});

test('a partial list names the nodes that did not answer', async () => {
  const api = new ExecutionsAPI(() => 'tok', fakeFetch(200, { executions: [{ id: 'a', status: 'running' }], partial: true, unreachable: ['n2'] }).fn);
  const page = await api.listPage();
  assert.deepEqual(page, { executions: [{ id: 'a', status: 'running' }], unreachable: ['n2'] });
  assert.equal(partialText(page.unreachable), 'Some nodes did not answer: n2. Their executions are missing from this list.');
  const whole = await new ExecutionsAPI(() => 'tok', fakeFetch(200, { executions: [] }).fn).listPage();
  assert.deepEqual(whole.unreachable, []);
  assert.equal(partialText(whole.unreachable), '');
});
