// transport.js: the client's connection to the gateway. It holds one
// WebSocket at a time, authenticates it, keeps it alive with pings, and
// replaces it with backoff whenever it fails, until closed. It knows
// nothing of executions: it hands control messages and output frames to
// its handler, and says when a socket opened and when it was dropped.

import { SUBPROTOCOL, BEARER_PREFIX, CLOSE_SERVICE_RESTART, decodeOutput } from './wire.js';

/**
 * @typedef {import('./wire.js').Message} Message
 * @typedef {import('./wire.js').OutputFrame} OutputFrame
 */

/**
 * @typedef {'connecting' | 'live' | 'reconnecting' | 'closed'} ConnectionState
 * @typedef {{state: ConnectionState, delay?: number, attempt?: number, reason?: string, restart?: boolean, lost?: boolean}} StatusChange
 *   restart: the gateway closed with 1012 (it restarts) and no socket is
 *   up since; lost: a socket or an attempt failed otherwise and none is up
 *   since.
 * @typedef {{error: string, message: string}} TransportError an error not tied to an execution
 */

/**
 * @typedef {object} TransportOptions
 * @property {string} url WebSocket URL of /v1/connect.
 * @property {() => (string | null | Promise<string | null>)} getToken see ClientOptions.
 * @property {number} minDelay first reconnect delay bound in ms.
 * @property {number} maxDelay largest reconnect delay bound in ms.
 * @property {number} pingInterval ms between pings; a missing pong after
 *   another interval drops the socket.
 * @property {typeof WebSocket} WebSocket constructor to use.
 * @property {typeof fetch} [fetch] asks about a token whose socket failed before it opened.
 */

/**
 * @typedef {object} TransportHandler what a Transport reports to; it is
 *   called synchronously, from the socket's callbacks.
 * @property {() => void} opened a socket opened: the connection is live
 * @property {() => void} dropped the live socket (or the attempt) was abandoned
 * @property {(msg: Message) => void} control a control message arrived
 * @property {(frame: OutputFrame) => void} output an output frame arrived
 * @property {(s: StatusChange) => void} status the connection's state changed
 * @property {(e: TransportError) => void} error getting a token or a socket failed
 */

/**
 * backoffDelay is the delay before reconnect attempt n (0-based): a uniform
 * random time up to min(max, min*2^n) ("full jitter"), so a gateway restart
 * does not bring every browser back in the same millisecond.
 * @param {number} attempt
 * @param {number} [min]
 * @param {number} [max]
 * @param {() => number} [random]
 */
export function backoffDelay(attempt, min = 250, max = 10000, random = Math.random) {
  const bound = Math.min(max, min * 2 ** Math.min(attempt, 30));
  return Math.floor(random() * bound);
}

/**
 * RESTART_MAX_DELAY caps the reconnect delay after a close with 1012: a
 * restarting gateway is back within seconds.
 */
export const RESTART_MAX_DELAY = 2000;

/** The req of the ping that opens every socket. */
const HANDSHAKE_REQ = 'hello';

/** Transport is the client's one connection at a time to the gateway. */
export class Transport {
  /**
   * @param {TransportOptions} opts
   * @param {TransportHandler} handler
   */
  constructor(opts, handler) {
    this._opts = opts;
    this._handler = handler;
    /** @type {WebSocket | null} */
    this._ws = null;
    /** Whether the current socket is open: messages are sent only then. */
    this.live = false;
    /** Whether the transport stopped for good (close(), or no token). */
    this.closed = false;
    this._attempt = 0;
    /** Whether the gateway closed with 1012 and no socket is up since. */
    this._restart = false;
    /** How many WebSocket connections were opened. */
    this.connections = 0;
    /** @type {StatusChange} */
    this.status = { state: 'connecting' };
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    this._timer = undefined;
    /** @type {ReturnType<typeof setInterval> | undefined} */
    this._pingTimer = undefined;
    this._awaitingPong = false;
    /** Whether the open socket waits for the hello or the handshake's pong. */
    this._handshaking = false;
    /** @type {Message | null} the hello of the current socket; null from a gateway that sends none */
    this.hello = null;
    /** @type {string | undefined} the token of the current socket */
    this._token = undefined;
    /** @type {string | undefined} the last token _checkToken asked about */
    this._checked = undefined;
  }

  /** start connects; after a failure it reconnects until close(). */
  start() {
    this._connect();
  }

  /** close stops reconnecting and closes the socket. */
  close() {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this._timer);
    this._stopPing();
    this._ws?.close(1000);
    this._ws = null;
    this.live = false;
    this._setStatus({ state: 'closed' });
  }

  /**
   * send sends a control message; while not live it is dropped (what
   * matters is sent again on the next attach).
   * @param {Record<string, unknown>} msg
   */
  send(msg) {
    if (this.live && this._ws) this._ws.send(JSON.stringify(msg));
  }

  /** @param {Uint8Array<ArrayBuffer>} bytes a binary frame, dropped while not live */
  sendBinary(bytes) {
    if (this.live && this._ws) this._ws.send(bytes);
  }

  /**
   * drop abandons the current socket and schedules a reconnect.
   * @param {string} why
   * @param {boolean} [restart] the gateway closed with 1012: it restarts
   */
  drop(why, restart = false) {
    if (restart) this._restart = true;
    const ws = this._ws;
    if (ws && !this.live && this._token) this._checkToken(this._token);
    this._ws = null;
    this.live = false;
    this._handshaking = false;
    this._stopPing();
    if (ws && ws.readyState <= 1) {
      try { ws.close(1000); } catch { /* already failing */ }
    }
    this._handler.dropped();
    if (!this.closed) this._scheduleReconnect(why);
  }

  /**
   * _checkToken asks the gateway's HTTP API about a token whose socket
   * failed before it opened: a browser's WebSocket cannot tell a refused
   * handshake (401) from a network failure. A 401 is told once per token
   * as the error 'unauthorized'; reconnecting goes on, with a fresh token
   * each time getToken gives one.
   * @param {string} token
   */
  async _checkToken(token) {
    const f = this._opts.fetch ?? globalThis.fetch;
    if (!f || this._checked === token) return;
    this._checked = token;
    const base = this._opts.url.replace(/^ws/, 'http').replace(/\/v1\/connect.*$/, '');
    try {
      const resp = await f(base + '/v1/executions/-', { headers: { Authorization: `Bearer ${token}` } });
      if (resp.status === 401) this._handler.error({ error: 'unauthorized', message: 'the gateway refused the token' });
    } catch { /* unreachable: the reconnects say so */ }
  }

  /** reauth answers auth-expiring with a fresh token on the same socket. */
  async reauth() {
    const ws = this._ws;
    let token;
    try {
      token = await this._opts.getToken();
    } catch (err) {
      this._handler.error({ error: 'token', message: String(err) });
      return;
    }
    if (this._ws === ws && token) this.send({ type: 'reauth', token });
  }

  /** @param {StatusChange} s */
  _setStatus(s) {
    this.status = s;
    this._handler.status(s);
  }

  async _connect() {
    if (this.closed) return;
    this._setStatus({ state: 'connecting', attempt: this._attempt, ...this._outage() });
    let token;
    try {
      token = await this._opts.getToken();
    } catch (err) {
      this._handler.error({ error: 'token', message: String(err) });
      this._scheduleReconnect();
      return;
    }
    if (this.closed) return;
    if (token === null) {
      this.closed = true;
      this._setStatus({ state: 'closed', reason: 'no token' });
      return;
    }
    this._token = token;
    const protocols = [SUBPROTOCOL];
    if (token) protocols.push(BEARER_PREFIX + token);
    let ws;
    try {
      ws = new this._opts.WebSocket(this._opts.url, protocols);
    } catch (err) {
      this._handler.error({ error: 'connect', message: String(err) });
      this._scheduleReconnect();
      return;
    }
    this.connections++;
    ws.binaryType = 'arraybuffer';
    this._ws = ws;
    ws.onopen = () => this._ws === ws && this._onOpen();
    ws.onmessage = (e) => this._ws === ws && this._onMessage(e.data);
    ws.onclose = (e) => this._ws === ws && this.drop(`closed ${e.code}`, e.code === CLOSE_SERVICE_RESTART);
    ws.onerror = () => this._ws === ws && this.drop('socket error');
  }

  /**
   * _onOpen starts the handshake: a gateway with acknowledged delivery
   * sends hello before any answer, one from before sends none. So the
   * client pings and the socket counts as opened at the hello or at the
   * pong, whichever comes first; only then is anything sent that depends
   * on what the gateway supports.
   */
  /**
   * ready is whether the handshake is done: what the client sends now may
   * depend on what the gateway supports (its hello).
   */
  get ready() {
    return this.live && !this._handshaking;
  }

  _onOpen() {
    this.live = true;
    this.hello = null;
    this._handshaking = true;
    this.send({ type: 'ping', req: HANDSHAKE_REQ });
  }

  /**
   * _handshake consumes the messages of the handshake; false for others.
   * @param {Message} msg
   */
  _handshake(msg) {
    if (msg.type === 'pong' && msg.req === HANDSHAKE_REQ) {
      if (!this._handshaking) return true; // left behind by a hello
    } else if (msg.type !== 'hello' || !this._handshaking) {
      return false;
    }
    if (msg.type === 'hello') this.hello = msg;
    this._handshaking = false;
    this._attempt = 0;
    this._restart = false;
    this._setStatus({ state: 'live' });
    this._startPing();
    this._handler.opened();
    return true;
  }

  /** @param {string} [why] */
  _scheduleReconnect(why) {
    const max = this._restart ? Math.min(this._opts.maxDelay, RESTART_MAX_DELAY) : this._opts.maxDelay;
    const delay = backoffDelay(this._attempt++, this._opts.minDelay, max);
    this._setStatus({ state: 'reconnecting', delay, attempt: this._attempt, reason: why, ...this._outage() });
    clearTimeout(this._timer);
    this._timer = setTimeout(() => this._connect(), delay);
  }

  /**
   * _outage says why no socket is up: a restart, or a lost connection
   * (nothing on the first attempt).
   * @returns {{restart?: boolean, lost?: boolean}}
   */
  _outage() {
    if (this._restart) return { restart: true };
    return this._attempt > 0 ? { lost: true } : {};
  }

  _startPing() {
    this._stopPing();
    this._awaitingPong = false;
    this._pingTimer = setInterval(() => {
      if (this._awaitingPong) {
        this.drop('no pong');
        return;
      }
      this._awaitingPong = true;
      this.send({ type: 'ping' });
    }, this._opts.pingInterval);
  }

  _stopPing() {
    clearInterval(this._pingTimer);
    this._pingTimer = undefined;
  }

  /**
   * _onMessage parses what arrived; a malformed control message or a
   * truncated frame drops the socket, to resume after the last complete
   * event.
   * @param {string | ArrayBuffer} data
   */
  _onMessage(data) {
    this._awaitingPong = false; // any traffic shows the socket is alive
    if (typeof data === 'string') {
      let msg;
      try {
        msg = JSON.parse(data);
      } catch {
        this.drop('malformed control message');
        return;
      }
      if (this._handshake(msg)) return;
      this._handler.control(msg);
      return;
    }
    let frame;
    try {
      frame = decodeOutput(data);
    } catch {
      this.drop('truncated output frame');
      return;
    }
    if (frame) this._handler.output(frame);
  }
}
