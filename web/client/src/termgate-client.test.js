// Unit tests of the client module with a fake WebSocket: `npm test`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TermgateClient } from './termgate-client.js';
import { outputFrame } from './wiretest.js';


/** FakeSocket records what the client sends; tests play the server. */
class FakeSocket {
  static all = [];
  constructor(url, protocols) {
    this.url = url;
    this.protocols = protocols;
    this.readyState = 0;
    this.sent = [];
    FakeSocket.all.push(this);
  }
  send(m) { this.sent.push(typeof m === 'string' ? JSON.parse(m) : m); }
  close() { this.readyState = 3; }
  open() { this.readyState = 1; this.onopen?.(); }
  text(m) { this.onmessage?.({ data: JSON.stringify(m) }); }
  binary(b) { this.onmessage?.({ data: b }); }
  drop(code = 1006) { this.readyState = 3; this.onclose?.({ code }); }
  controls() { return this.sent.filter((m) => !(m instanceof Uint8Array)); }
  inputs() { return this.sent.filter((m) => m instanceof Uint8Array).map((m) => ({ offset: Number(new DataView(m.buffer).getBigUint64(5)), text: new TextDecoder().decode(m.subarray(13)) })); }
}

const tick = (ms = 5) => new Promise((r) => setTimeout(r, ms));

/** HELLO is a gateway's hello with every feature of acknowledged delivery. */
const HELLO = { type: 'hello', server: 'termgate test', protocol: 1, features: ['ack', 'input-ack', 'seen', 'flow'], limits: { ring_bytes: 1 << 20 } };

/**
 * connected opens the client's newest socket and plays the handshake: the
 * hello when given, else the pong of a gateway from before hello.
 */
async function connected(client, hello = null) {
  await tick();
  const ws = FakeSocket.all.at(-1);
  ws.open();
  const ping = ws.controls().find((m) => m.type === 'ping');
  assert.ok(ping, 'the client pings at open');
  assert.equal(ws.controls().length, 1, 'nothing but the ping before the handshake');
  if (hello) ws.text(hello);
  else ws.text({ type: 'pong', req: ping.req });
  return ws;
}

/**
 * attachedJob: a client whose execution "job" is attached on channel 2;
 * with hello, by a gateway that acknowledges (attached with ack).
 */
async function attachedJob(hello = null, opts = {}) {
  FakeSocket.all = [];
  const client = new TermgateClient({ url: 'ws://x', getToken: () => 't', WebSocket: FakeSocket, minDelay: 1, maxDelay: 2, ...opts });
  const ws = await connected(client, hello);
  const ex = client.attach('job');
  const attach = ws.controls().find((m) => m.type === 'attach');
  const ack = hello ? { ack: true, incarnation: 'i1', flow: 'hold' } : {};
  ws.text({ type: 'attached', req: attach.req, channel: 2, id: 'job', status: 'running', pty: true, first_seq: 1, last_seq: 0, ...ack });
  return { client, ws, ex, attach };
}

test('reconnect reattaches after the last seq and resends input by offset', async () => {
  FakeSocket.all = [];
  let tokens = 0;
  const client = new TermgateClient({ url: 'ws://x/v1/connect', getToken: () => `t${++tokens}`, WebSocket: FakeSocket, minDelay: 1, maxDelay: 2 });
  const ws1 = await connected(client);
  assert.deepEqual(ws1.protocols, ['termgate.v1', 'termgate.bearer.t1']);
  const ex = client.start({ pty: { rows: 24, cols: 80 } });
  const start = ws1.controls().find((m) => m.type === 'start');
  assert.match(start.id, /^web-[0-9a-f]{24}$/);
  const out = [];
  ex.on('output', (b, stream, seq) => out.push([new TextDecoder().decode(b), stream, seq]));
  ws1.text({ type: 'started', req: start.req, id: start.id, status: 'running', pty: true });
  ws1.text({ type: 'attached', req: start.req, channel: 1, id: start.id, status: 'running', pty: true, first_seq: 1, last_seq: 1 });
  ws1.text({ type: 'event', channel: 1, seq: 1, event: 'started', rows: 24, cols: 80 });
  ws1.binary(outputFrame(1, 2, 1, 0, new TextEncoder().encode('hello')));
  ex.write('ab');
  assert.deepEqual(ws1.inputs(), [{ offset: 0, text: 'ab' }]);
  // A truncated frame drops the socket; its bytes are not delivered.
  ws1.binary(outputFrame(1, 3, 1, 5, new TextEncoder().encode('lo'), 10));
  assert.equal(client.status.state, 'reconnecting');
  ex.write('cd'); // typed while offline
  const ws2 = await connected(client);
  assert.deepEqual(ws2.protocols, ['termgate.v1', 'termgate.bearer.t2']);
  const attach = ws2.controls().find((m) => m.type === 'attach');
  assert.deepEqual({ ...attach, req: undefined }, { type: 'attach', id: start.id, after: 2, req: undefined });
  ws2.text({ type: 'attached', req: attach.req, channel: 4, id: start.id, status: 'running', pty: true, first_seq: 1, last_seq: 3, input_offset: 1 });
  assert.equal(ex.replaying, true);
  assert.deepEqual(ws2.inputs(), [{ offset: 1, text: 'bcd' }]);
  ws2.binary(outputFrame(4, 3, 1, 5, new TextEncoder().encode('world')));
  assert.equal(ex.replaying, false);
  ws2.binary(outputFrame(4, 3, 1, 5, new TextEncoder().encode('world'))); // a duplicate is ignored
  assert.deepEqual(out, [['hello', 'pty', 2], ['world', 'pty', 3]]);
  ex.closeStdin();
  await tick(40); // after the resend's pacing gap
  assert.deepEqual(ws2.controls().at(-1), { type: 'close-stdin', channel: 4, input_offset: 4 });
  ws2.text({ type: 'auth-expiring', expires_at: 'soon' });
  await tick();
  assert.deepEqual(ws2.controls().at(-1), { type: 'reauth', token: 't3' });
  let exit;
  ex.on('exit', (x) => { exit = x; });
  ws2.text({ type: 'gap', channel: 4, from: 4, to: 9, bytes: 77 });
  ws2.text({ type: 'exit', channel: 4, seq: 9, code: 3, reason: 'exited' });
  assert.deepEqual(exit, { code: 3, signal: '', reason: 'exited', seq: 9 });
  assert.equal(ex.closed, true);
  client.close();
  assert.equal(client.connections, 2);
});

test('a failed start is fatal and not retried', async () => {
  FakeSocket.all = [];
  const client = new TermgateClient({ url: 'ws://x', getToken: () => 't', WebSocket: FakeSocket, minDelay: 1, maxDelay: 2 });
  const ws = await connected(client);
  const ex = client.attach('gone', { readOnly: true });
  const attach = ws.controls().find((m) => m.type === 'attach');
  assert.equal(attach.read_only, true);
  let err;
  ex.on('error', (e) => { err = e; });
  ws.text({ type: 'error', req: attach.req, error: 'not_found', message: 'no such execution' });
  assert.equal(err.fatal, true);
  assert.equal(ex.closed, true);
  ws.drop();
  const ws2 = await connected(client);
  assert.equal(ws2.controls().filter((m) => m.type === 'attach').length, 0);
  client.close();
});

test('refused input is resent after a pause, from the offset the gateway has', async () => {
  const { client, ws, ex } = await attachedJob();
  let errors = 0;
  ex.on('error', () => { errors++; });
  ex.write('abc');
  await tick(30);
  ex.write('def');
  ex.write('g'); // within 20 ms of the last send: goes with the next
  assert.deepEqual(ws.inputs(), [{ offset: 0, text: 'abc' }, { offset: 3, text: 'def' }]);
  ws.text({ type: 'error', channel: 2, error: 'input_full', input_offset: 3 });
  ex.write('h');
  await tick(120);
  assert.equal(ws.inputs().length, 2, 'paused for 200 ms');
  await tick(150);
  assert.deepEqual(ws.inputs().slice(2), [{ offset: 3, text: 'defgh' }]);
  assert.equal(errors, 0, 'handled refusals are not errors for the page');
  ex.closeStdin();
  await tick(250);
  assert.deepEqual(ws.controls().at(-1), { type: 'close-stdin', channel: 2, input_offset: 8 });
  // The close was refused: input from offset 7 did not arrive.
  ws.text({ type: 'error', channel: 2, error: 'input_offset', input_offset: 7 });
  await tick(270);
  assert.deepEqual(ws.inputs().slice(3), [{ offset: 7, text: 'h' }]);
  await tick(250);
  assert.deepEqual(ws.controls().at(-1), { type: 'close-stdin', channel: 2, input_offset: 8 });
  assert.equal(ws.controls().filter((m) => m.type === 'close-stdin').length, 2);
  client.close();
});

test('small writes go out together; a rate-limit refusal resends from its offset', async () => {
  const { client, ws, ex } = await attachedJob();
  for (let i = 0; i < 5000; i++) ex.write('k');
  await tick(40);
  assert.deepEqual(ws.inputs(), [{ offset: 0, text: 'k' }, { offset: 1, text: 'k'.repeat(4999) }]);
  ws.text({ type: 'error', channel: 2, error: 'rate_limited', input_offset: 4000 });
  await tick(270);
  assert.deepEqual(ws.inputs().slice(2), [{ offset: 4000, text: 'k'.repeat(1000) }]);
  client.close();
});

test('a large write is paced: 64 KiB windows; a refusal pauses, longer without progress', async () => {
  const { client, ws, ex } = await attachedJob();
  let overflow;
  ex.on('error', (e) => { overflow = e; });
  ex.write('x'.repeat(1 << 20));
  const sent = () => ws.inputs().map((i) => [i.offset, i.text.length]);
  assert.deepEqual(sent(), [[0, 16384], [16384, 16384], [32768, 16384], [49152, 16384]]);
  await tick(30);
  assert.ok(sent().length >= 8, 'the next window 20 ms later');
  // A program that reads nothing: its queue is full at 64 KiB.
  ws.text({ type: 'error', channel: 2, error: 'input_full', input_offset: 65536 });
  let n = sent().length;
  await tick(120);
  assert.equal(sent().length, n, 'paused for 200 ms');
  await tick(150);
  assert.deepEqual(sent()[n], [65536, 16384], 'resent from the reported offset');
  assert.equal(sent().length, n + 4, 'one window per pause while recovering');
  ws.text({ type: 'error', channel: 2, error: 'input_full', input_offset: 65536 });
  n = sent().length;
  await tick(300);
  assert.equal(sent().length, n, 'no progress: the pause doubled to 400 ms');
  await tick(200);
  assert.deepEqual(sent()[n], [65536, 16384]);
  // More than 1 MiB unsent: the write is dropped whole and said so.
  assert.equal(ex.write(new Uint8Array(1 << 20)), false);
  assert.equal(overflow?.error, 'input_overflow');
  client.close();
});

test('a large write goes out in frames of at most 16 KiB', async () => {
  const { client, ws, ex } = await attachedJob();
  ex.write('x'.repeat(40000));
  assert.deepEqual(ws.inputs().map((i) => [i.offset, i.text.length]), [[0, 16384], [16384, 16384], [32768, 7232]]);
  client.close();
});

test('no token to be had: the client stops without detaching', async () => {
  FakeSocket.all = [];
  let token = 't';
  const client = new TermgateClient({ url: 'ws://x', getToken: () => token, WebSocket: FakeSocket, minDelay: 1, maxDelay: 2 });
  const ws = await connected(client);
  const ex = client.attach('job');
  token = null;
  ws.drop(4001);
  await tick(30);
  assert.equal(FakeSocket.all.length, 1, 'no new connection');
  assert.deepEqual(client.status, { state: 'closed', reason: 'no token' });
  assert.equal(ws.controls().some((m) => m.type === 'detach'), false);
  assert.equal(ex.closed, false);
});

test('a jump in sequence numbers drops the socket and resumes after the last event', async () => {
  const { client, ws, ex } = await attachedJob();
  const out = [];
  ex.on('output', (b, stream, seq) => out.push([new TextDecoder().decode(b), seq]));
  ws.binary(outputFrame(2, 1, 1, 0, new TextEncoder().encode('a')));
  ws.binary(outputFrame(2, 3, 1, 2, new TextEncoder().encode('c'))); // 2 was lost on the way
  assert.equal(client.status.state, 'reconnecting');
  const ws2 = await connected(client);
  const attach = ws2.controls().find((m) => m.type === 'attach');
  assert.equal(attach.after, 1);
  ws2.text({ type: 'attached', req: attach.req, channel: 1, id: 'job', status: 'running', pty: true, first_seq: 1, last_seq: 3 });
  ws2.binary(outputFrame(1, 2, 1, 1, new TextEncoder().encode('b')));
  ws2.binary(outputFrame(1, 3, 1, 2, new TextEncoder().encode('c')));
  assert.deepEqual(out, [['a', 1], ['b', 2], ['c', 3]]);
  client.close();
});

const enc = (t) => new TextEncoder().encode(t);

test('hello: attach asks for ack; a reattach says seen and the incarnation', async () => {
  const { client, ws, ex, attach } = await attachedJob(HELLO);
  assert.deepEqual(client.hello.features, HELLO.features);
  assert.equal(attach.ack, true);
  assert.equal(attach.seen, undefined);
  assert.equal(ex.ack, true);
  const gaps = [];
  ex.on('gap', (g) => gaps.push(g));
  ws.binary(outputFrame(2, 1, 1, 0, enc('abc')));
  ws.text({ type: 'gap', channel: 2, from: 2, to: 5, bytes: 10, cause: 'hold_expired' });
  ws.text({ type: 'gap', channel: 2, from: 5, to: 6, bytes: 0, cause: 'unheld', inexact: true });
  ws.binary(outputFrame(2, 6, 1, 13, enc('de')));
  assert.deepEqual(gaps, [{ from: 2, to: 5, bytes: 10, cause: 'hold_expired', inexact: false }, { from: 5, to: 6, bytes: 0, cause: 'unheld', inexact: true }]);
  ws.drop();
  const ws2 = await connected(client, HELLO);
  const again = ws2.controls().find((m) => m.type === 'attach');
  assert.deepEqual({ ...again, req: undefined }, { type: 'attach', id: 'job', after: 6, ack: true, seen: 15, incarnation: 'i1', req: undefined });
  client.close();
});

test('acks: at once after 64 KiB handed to listeners, else 25 ms after', async () => {
  const { client, ws, ex } = await attachedJob(HELLO);
  ex.on('output', () => {});
  const acks = () => ws.controls().filter((m) => m.type === 'ack');
  ws.binary(outputFrame(2, 1, 1, 0, new Uint8Array(40 << 10)));
  assert.equal(acks().length, 0);
  ws.binary(outputFrame(2, 2, 1, 40 << 10, new Uint8Array(30 << 10)));
  assert.deepEqual(acks(), [{ type: 'ack', channel: 2, seq: 2 }], 'by bytes, without waiting');
  ws.binary(outputFrame(2, 3, 1, 70 << 10, enc('x')));
  ws.text({ type: 'event', channel: 2, seq: 4, event: 'resize', rows: 3, cols: 4 });
  assert.equal(acks().length, 1);
  await tick(60);
  assert.deepEqual(acks().at(-1), { type: 'ack', channel: 2, seq: 4 }, 'by the timer');
  ws.text({ type: 'exit', channel: 2, seq: 5, code: 0, reason: 'exited' });
  await tick(60);
  assert.equal(acks().length, 2, 'the exit is not acked');
  client.close();
});

test('defer: output counts as processed, and is acked, only once its listener says so, in order', async () => {
  const { client, ws, ex } = await attachedJob(HELLO);
  /** @type {(() => void)[]} */
  const dones = [];
  ex.on('output', () => dones.push(ex.defer()));
  const acks = () => ws.controls().filter((m) => m.type === 'ack');
  ws.binary(outputFrame(2, 1, 1, 0, new Uint8Array(40 << 10)));
  ws.binary(outputFrame(2, 2, 1, 40 << 10, new Uint8Array(30 << 10)));
  ws.text({ type: 'event', channel: 2, seq: 3, event: 'resize', rows: 3, cols: 4 });
  await tick(60);
  assert.equal(acks().length, 0, 'nothing processed yet');
  dones[1]();
  await tick(60);
  assert.equal(acks().length, 0, 'seq 2 is done but seq 1 is not');
  dones[0]();
  assert.deepEqual(acks(), [{ type: 'ack', channel: 2, seq: 3 }], 'both done: 70 KiB processed, and the resize after them');
  client.close();
});

test('snapshot: asked for when offered; it stands in for history and the execution continues after it', async () => {
  FakeSocket.all = [];
  const client = new TermgateClient({ url: 'ws://x', getToken: () => 't', WebSocket: FakeSocket, minDelay: 1, maxDelay: 2 });
  const ws = await connected(client, { ...HELLO, features: [...HELLO.features, 'snapshot'] });
  const ex = client.attach('tui', { snapshot: true });
  const attach = ws.controls().find((m) => m.type === 'attach');
  assert.equal(attach.snapshot, true);
  /** @type {unknown[]} */
  const got = [];
  ex.on('snapshot', (s) => got.push(['snapshot', s.data, s.seq]));
  ex.on('output', (b, _stream, seq) => got.push(['output', new TextDecoder().decode(b), seq]));
  ws.text({ type: 'attached', req: attach.req, channel: 2, id: 'tui', status: 'running', pty: true, first_seq: 41, last_seq: 42, ack: true, incarnation: 'i1' });
  ws.text({ type: 'snapshot', channel: 2, seq: 40, seen: 900, rows: 24, cols: 80, data: '\x1bc screen', from: 1, to: 41, bytes: 900 });
  ws.binary(outputFrame(2, 41, 1, 900, enc('x')));
  assert.deepEqual(got, [['snapshot', '\x1bc screen', 40], ['output', 'x', 41]]);
  assert.equal(ex.lastSeq, 41);
  assert.equal(ex.seen, 901);
  client.close();
});

test('a start made during the handshake waits for the hello, and then acknowledges', async () => {
  FakeSocket.all = [];
  const client = new TermgateClient({ url: 'ws://x', getToken: () => 't', WebSocket: FakeSocket, minDelay: 1, maxDelay: 2 });
  await tick();
  const ws = FakeSocket.all.at(-1);
  ws.open();
  client.start({ pty: { rows: 24, cols: 80 } });
  assert.equal(ws.controls().filter((m) => m.type === 'start').length, 0, 'nothing is sent before the hello');
  ws.text(HELLO);
  const start = ws.controls().find((m) => m.type === 'start');
  assert.ok(start, 'the start goes once the hello arrived');
  assert.equal(start.ack, true);
  client.close();
});

test('start asks for ack on its attach when the gateway offers it', async () => {
  FakeSocket.all = [];
  const client = new TermgateClient({ url: 'ws://x', getToken: () => 't', WebSocket: FakeSocket, minDelay: 1, maxDelay: 2 });
  const ws = await connected(client, HELLO);
  client.start({ pty: { rows: 24, cols: 80 }, flow: 'live' });
  const start = ws.controls().find((m) => m.type === 'start');
  assert.equal(start.ack, true);
  assert.equal(start.flow, 'live');
  client.close();
});

test('no hello: attach and input as before, no acks', async () => {
  const { client, ws, ex, attach } = await attachedJob();
  assert.equal(client.hello, null);
  assert.deepEqual(Object.keys(attach).sort(), ['after', 'id', 'req', 'type']);
  ws.binary(outputFrame(2, 1, 1, 0, enc('abc')));
  await tick(60);
  assert.equal(ws.controls().some((m) => m.type === 'ack'), false);
  assert.equal(ex.ack, false);
  client.close();
});

test('a new incarnation is followed from its first event', async () => {
  const { client, ws, ex } = await attachedJob(HELLO);
  const out = [];
  ex.on('output', (b) => out.push(new TextDecoder().decode(b)));
  ws.binary(outputFrame(2, 1, 1, 0, enc('old')));
  ws.drop();
  const ws2 = await connected(client, HELLO);
  const again = ws2.controls().find((m) => m.type === 'attach');
  assert.equal(again.incarnation, 'i1');
  ws2.text({ type: 'attached', req: again.req, channel: 3, id: 'job', status: 'running', last_seq: 1, ack: true, incarnation: 'i2' });
  ws2.binary(outputFrame(3, 1, 1, 0, enc('new')));
  assert.deepEqual(out, ['old', 'new']);
  assert.equal(ex.incarnation, 'i2');
  assert.equal(ex.seen, 3);
  client.close();
});

test('input-ack: input is kept until acknowledged, resent after a refusal, writeAsync waits at the bound', async () => {
  const { client, ws, ex } = await attachedJob(HELLO, { maxUnackedInput: 64 << 10 });
  const sent = () => ws.inputs().map((i) => [i.offset, i.text.length]);
  ex.write('a'.repeat(40 << 10));
  await tick(30);
  let taken = false;
  const p = ex.writeAsync('b'.repeat(40 << 10)).then((ok) => { taken = ok; });
  await tick(30);
  assert.equal(ex.write('c'), false, 'write refuses while writes wait');
  await tick(30);
  assert.equal(sent().reduce((n, [, l]) => n + l, 0), 64 << 10, 'only 64 KiB kept and sent');
  assert.equal(taken, false, 'writeAsync waits while 64 KiB are unacknowledged');
  ws.text({ type: 'input-ack', channel: 2, input_offset: 16 << 10, input_end: 16 << 10 });
  await p;
  assert.equal(taken, true);
  await tick(30);
  assert.equal(sent().reduce((n, [, l]) => n + l, 0), 80 << 10);
  // Frames refused: resent from input_offset after the pause.
  const n = sent().length;
  ws.text({ type: 'input-ack', channel: 2, input_offset: 20 << 10, input_end: 80 << 10, error: 'input_full' });
  await tick(120);
  assert.equal(sent().length, n, 'paused');
  await tick(150);
  assert.deepEqual(sent()[n], [20 << 10, 16 << 10]);
  // A reconnect resends everything not acknowledged, however much was sent.
  ws.drop();
  const ws2 = await connected(client, HELLO);
  const again = ws2.controls().find((m) => m.type === 'attach');
  ws2.text({ type: 'attached', req: again.req, channel: 4, id: 'job', status: 'running', ack: true, incarnation: 'i1', input_offset: 20 << 10 });
  await tick(100);
  const resent = ws2.inputs();
  assert.equal(resent[0].offset, 20 << 10);
  assert.equal(resent.map((i) => i.text).join(''), 'a'.repeat(20 << 10) + 'b'.repeat(40 << 10));
  client.close();
});

test('a close with 1012 is a restart: the status says so until live, delays stay short, and every execution resumes', async () => {
  FakeSocket.all = [];
  const client = new TermgateClient({ url: 'ws://x', getToken: () => 't', WebSocket: FakeSocket, minDelay: 1, maxDelay: 60000 });
  const ws1 = await connected(client, HELLO);
  const ex = client.attach('job');
  const a1 = ws1.controls().find((m) => m.type === 'attach');
  ws1.text({ type: 'attached', req: a1.req, channel: 1, id: 'job', status: 'running', pty: true, first_seq: 1, last_seq: 0, ack: true, incarnation: 'i1' });
  ws1.binary(outputFrame(1, 1, 1, 0, new TextEncoder().encode('one')));
  const statuses = [];
  client.on('status', (s) => statuses.push(s));
  ws1.drop(1012);
  assert.equal(client.status.state, 'reconnecting');
  assert.equal(client.status.restart, true);
  // Refused dials meanwhile keep saying restart, with delays of at most 2 s.
  for (let i = 0; i < 8; i++) {
    await tick(1);
    const ws = FakeSocket.all.at(-1);
    if (ws !== ws1 && ws.readyState === 0) ws.drop(1006);
  }
  const reconnecting = statuses.filter((s) => s.state === 'reconnecting');
  assert.ok(reconnecting.length >= 2, 'several attempts');
  assert.ok(reconnecting.every((s) => s.restart === true && s.delay <= 2000), JSON.stringify(reconnecting));
  // The gateway is back: the execution resumes after what it delivered.
  let ws2;
  for (let i = 0; i < 200 && !ws2; i++) {
    await tick(1);
    const ws = FakeSocket.all.at(-1);
    if (ws !== ws1 && ws.readyState === 0) ws2 = ws;
  }
  ws2.open();
  ws2.text(HELLO);
  const a2 = ws2.controls().find((m) => m.type === 'attach');
  assert.equal(a2.id, 'job');
  assert.equal(a2.after, 1);
  assert.equal(client.status.state, 'live');
  assert.ok(!client.status.restart);
  client.close();
});

test('a connection lost without 1012 is not a restart', async () => {
  const { client, ws } = await attachedJob(HELLO);
  ws.drop(1006);
  assert.equal(client.status.state, 'reconnecting');
  assert.ok(!client.status.restart);
  client.close();
});

test('an attach answered unavailable keeps the execution and is asked again after retry_ms', async () => {
  const { client, ws, ex } = await attachedJob(HELLO);
  ws.binary(outputFrame(2, 1, 1, 0, enc('abc')));
  ws.drop();
  const ws2 = await connected(client, HELLO);
  const first = ws2.controls().find((m) => m.type === 'attach');
  const errors = [];
  ex.on('error', (e) => errors.push(e));
  const answered = Date.now();
  ws2.text({ type: 'error', req: first.req, error: 'unavailable', message: 'node n2 is not answering', retry_ms: 60 });
  assert.equal(ex.closed, false, 'unavailable is not fatal');
  assert.deepEqual(errors.map((e) => [e.error, e.fatal]), [['unavailable', false]]);
  let again;
  for (let i = 0; i < 400 && !again; i++) {
    await tick(5);
    again = ws2.controls().filter((m) => m.type === 'attach')[1];
  }
  assert.ok(again, 'the attach was asked again');
  assert.ok(Date.now() - answered >= 55, 'not before retry_ms');
  assert.deepEqual({ ...again, req: undefined }, { type: 'attach', id: 'job', after: 1, ack: true, seen: 3, incarnation: 'i1', req: undefined });
  ws2.text({ type: 'attached', req: again.req, channel: 4, id: 'job', status: 'running', pty: true, last_seq: 1, ack: true, incarnation: 'i1' });
  assert.equal(ex.channel, 4);
  client.close();
});

test('a detached sent with an error resumes on the same connection and resends input from its offset', async () => {
  const { client, ws, ex } = await attachedJob(HELLO);
  ws.text({ type: 'input-ack', channel: 2, input_offset: 0 }); // nothing yet
  ws.binary(outputFrame(2, 1, 1, 0, enc('abc')));
  ex.write('0123456789');
  assert.deepEqual(ws.inputs(), [{ offset: 0, text: '0123456789' }]);
  ws.text({ type: 'detached', channel: 2, error: 'unavailable', message: 'node n2 is not answering', retry_ms: 1000 });
  assert.equal(ex.channel, null);
  assert.equal(FakeSocket.all.at(-1), ws, 'no new connection');
  const attaches = ws.controls().filter((m) => m.type === 'attach');
  assert.equal(attaches.length, 2, 'attached again at once');
  assert.deepEqual({ ...attaches[1], req: undefined }, { type: 'attach', id: 'job', after: 1, ack: true, seen: 3, incarnation: 'i1', req: undefined });
  ws.text({ type: 'attached', req: attaches[1].req, channel: 3, id: 'job', status: 'running', pty: true, last_seq: 1, ack: true, incarnation: 'i1', input_offset: 4 });
  assert.deepEqual(ws.inputs().at(-1), { offset: 4, text: '456789' });
  const out = [];
  ex.on('output', (b) => out.push(new TextDecoder().decode(b)));
  ws.binary(outputFrame(2, 2, 1, 3, enc('stale'))); // the old channel is forgotten
  ws.binary(outputFrame(3, 2, 1, 3, enc('de')));
  assert.deepEqual(out, ['de']);
  client.close();
});
