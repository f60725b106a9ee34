// termgate-client.js: the browser side of termgate's wire protocol v1
// (gateway/PROTOCOL.md). It holds one WebSocket, multiplexes executions over
// it, and hides disconnects: it reconnects with backoff, reattaches each
// execution after the last event it delivered and resends the input the
// gateway lacks. See web/CLIENT.md. No DOM: it needs only WebSocket.
//
// The pieces, each in a module of its own: wire.js (frames, codes),
// transport.js (the socket: auth, pings, reconnects), execution.js (one
// execution's events and controls), input.js (its input queue). This
// module joins them: it routes each message to its execution by request
// and channel, and reattaches every execution when a socket opens.

import { Emitter } from './emitter.js';
import { Execution } from './execution.js';
import { Transport } from './transport.js';

export { SUBPROTOCOL, BEARER_PREFIX, STREAMS, FATAL_ERRORS, INPUT_REFUSED_ERRORS, decodeOutput, encodeInput } from './wire.js';
export { backoffDelay } from './transport.js';
export { Execution } from './execution.js';

/**
 * @typedef {import('./wire.js').Message} Message
 * @typedef {import('./wire.js').OutputFrame} OutputFrame
 * @typedef {import('./transport.js').ConnectionState} ConnectionState
 * @typedef {import('./transport.js').StatusChange} StatusChange
 * @typedef {import('./execution.js').StartMessage} StartMessage
 * @typedef {import('./execution.js').ExitInfo} ExitInfo
 */

/**
 * @typedef {object} ClientOptions
 * @property {string} [url] WebSocket URL of /v1/connect; default: this page's origin.
 * @property {() => (string | null | Promise<string | null>)} getToken returns a fresh
 *   token; asked before every connection and when the gateway says the token is
 *   expiring. null means none can be had: the client stops reconnecting (status
 *   closed, reason 'no token'); the executions keep running on the gateway.
 * @property {number} [minDelay] first reconnect delay bound in ms (250).
 * @property {number} [maxDelay] largest reconnect delay bound in ms (10000).
 * @property {number} [pingInterval] ms between the client's own pings (20000); a
 *   missing pong after another interval drops the socket.
 * @property {number} [maxUnackedInput] bytes of input kept until the gateway has them (1 MiB):
 *   with input-ack, write() refuses and writeAsync() waits beyond it.
 * @property {typeof WebSocket} [WebSocket] constructor to use (tests, node).
 * @property {typeof fetch} [fetch] asks the HTTP API whether a token is refused when a socket fails before it opens (tests)
 */

/**
 * @typedef {object} StartOptions
 * @property {string} [id] idempotency key; default: a random "web-..." ID, so
 *   a start retried after a disconnect never makes a second execution.
 * @property {string} [command] an allowed program; the gateway's default when absent.
 * @property {string[]} [args]
 * @property {Record<string, string>} [env]
 * @property {string} [cwd]
 * @property {{rows: number, cols: number}} [pty] a terminal of this size; pipes when absent.
 * @property {number} [timeout_ms]
 * @property {Record<string, number>} [limits]
 * @property {'hold'|'live'} [flow] whether the program waits for a slow writer (hold, the default)
 * @property {number} [hold_ms] how long held output waits for this client to come back
 * @property {boolean} [snapshot] after a reconnect, a 'snapshot' of the screen in place of evicted history
 * @property {boolean} [ports] 'ports' events: the TCP ports the execution's programs listen on
 * @property {boolean} [interactive] pipes a person works in: input stays open, the idle timeout applies
 * @property {number} [idle_timeout_ms]
 * @property {string} [network] 'none', 'host' or a network policy's name
 * @property {boolean} [record] record output and resizes (exec:record)
 * @property {boolean} [record_input] record input too
 * @property {boolean} [workspace_read_only] start options (PROTOCOL.md, "Start options")
 * @property {string[]} [mounts]
 * @property {'none'|'self-exe'|'private'} [proc]
 * @property {number} [max_output_bytes] the final result's output budget per stream
 * @property {number} [retention_ms]
 */

/** The StartOptions a start message carries besides its id. */
const START_FIELDS = new Set(['command', 'args', 'env', 'cwd', 'pty', 'timeout_ms', 'idle_timeout_ms', 'interactive', 'limits', 'flow', 'hold_ms',
  'network', 'record', 'record_input', 'workspace_read_only', 'mounts', 'proc', 'max_output_bytes', 'retention_ms']);

function randomID() {
  const b = new Uint8Array(12);
  crypto.getRandomValues(b);
  return 'web-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

/**
 * TermgateClient holds one WebSocket to a gateway and the executions
 * followed over it. It connects at once and reconnects on any failure until
 * close(). Events: 'status' (StatusChange), 'error' (an error not tied to an
 * execution).
 */
export class TermgateClient extends Emitter {
  /** @param {ClientOptions} opts */
  constructor(opts) {
    super();
    const o = {
      minDelay: 250, maxDelay: 10000, pingInterval: 20000, maxUnackedInput: 1 << 20,
      url: defaultURL(), WebSocket: globalThis.WebSocket, ...opts,
    };
    if (typeof o.getToken !== 'function') throw new TypeError('termgate: getToken is required');
    this._maxUnackedInput = o.maxUnackedInput;
    this._reqSeq = 0;
    /** @type {Map<string, Execution>} req -> execution awaiting an answer */
    this._pending = new Map();
    /** @type {Map<number, Execution>} */
    this._channels = new Map();
    /** @type {Set<Execution>} */
    this._executions = new Set();
    /** @type {import('./execution.js').Link} */
    this._link = {
      send: (msg) => this._transport.send(msg),
      sendBinary: (bytes) => this._transport.sendBinary(bytes),
      drop: (why) => this._transport.drop(why),
      forget: (ex) => this._forget(ex),
      features: () => this._transport.hello?.features ?? [],
      reattach: (ex) => { if (this._transport.ready && !ex.closed) this._sendAttach(ex); },
    };
    this._transport = new Transport(o, {
      opened: () => { for (const ex of this._executions) this._sendAttach(ex); },
      dropped: () => this._onDropped(),
      control: (msg) => this._onControl(msg),
      output: (frame) => this._channels.get(frame.channel)?._onOutput(frame),
      status: (s) => this._emit('status', s),
      error: (e) => this._emit('error', e),
    });
    this._transport.start();
  }

  /** The connection's state, as the last 'status' event said. */
  get status() {
    return this._transport.status;
  }

  /**
   * The gateway's hello on the current connection (server, protocol,
   * features, limits), or null from a gateway that sends none.
   * @returns {Message | null}
   */
  get hello() {
    return this._transport.hello;
  }

  /** How many WebSocket connections this client has opened. */
  get connections() {
    return this._transport.connections;
  }

  /**
   * start starts an execution and attaches to it.
   * @param {StartOptions} [spec]
   * @returns {Execution}
   */
  start(spec = {}) {
    const { id, snapshot, ports, ...rest } = spec;
    /** @type {StartMessage} */
    const msg = { type: 'start', id: id ?? randomID(), attach: true };
    for (const [k, v] of Object.entries(rest)) {
      if (START_FIELDS.has(k) && v !== undefined) Object.assign(msg, { [k]: v });
    }
    return this._follow(new Execution(this._link, { start: msg, snapshot, ports }, this._maxUnackedInput));
  }

  /**
   * attach follows an existing execution from its first retained event.
   * @param {string} id
   * @param {{readOnly?: boolean, after?: number, incarnation?: string, snapshot?: boolean, ports?: boolean}} [opts]
   *   a non-zero after needs the incarnation it belongs to (Execution.incarnation when it was
   *   delivered): the gateway refuses after alone with invalid_after. snapshot: a terminal
   *   shown on screen gets a 'snapshot' in place of evicted history
   * @returns {Execution}
   */
  attach(id, opts = {}) {
    return this._follow(new Execution(this._link, { id, readOnly: opts.readOnly, after: opts.after, incarnation: opts.incarnation, snapshot: opts.snapshot, ports: opts.ports }, this._maxUnackedInput));
  }

  /** close detaches everything and stops reconnecting. */
  close() {
    if (this._transport.closed) return;
    for (const ex of [...this._executions]) ex.detach();
    this._transport.close();
  }

  /** @param {Execution} ex */
  _follow(ex) {
    this._executions.add(ex);
    if (this._transport.ready) this._sendAttach(ex); // else opened() sends it after the handshake
    return ex;
  }

  /** @param {Execution} ex */
  _forget(ex) {
    this._executions.delete(ex);
    if (ex.channel !== null) this._channels.delete(ex.channel);
    for (const [req, e] of this._pending) if (e === ex) this._pending.delete(req);
  }

  /** @param {Execution} ex */
  _sendAttach(ex) {
    const msg = ex._attachMessage();
    const req = String(++this._reqSeq);
    msg.req = req;
    this._pending.set(req, ex);
    this._transport.send(msg);
  }

  /** _onDropped forgets the connection's requests and channels. */
  _onDropped() {
    this._pending.clear();
    this._channels.clear();
    for (const ex of this._executions) ex._onDisconnect();
  }

  /** @param {Message} msg */
  _onControl(msg) {
    const byReq = msg.req !== undefined ? this._pending.get(msg.req) : undefined;
    const byChannel = msg.channel ? this._channels.get(msg.channel) : undefined;
    switch (msg.type) {
      case 'started':
        byReq?._onStarted(msg);
        break;
      case 'attached':
        this._onAttached(msg, byReq);
        break;
      case 'event':
        byChannel?._onEvent(msg);
        break;
      case 'gap':
        byChannel?._onGap(msg);
        break;
      case 'snapshot':
        byChannel?._onSnapshot(msg);
        break;
      case 'ports':
        byChannel?._onPorts(msg);
        break;
      case 'input-ack':
        byChannel?._onInputAck(msg);
        break;
      case 'exit':
        if (byChannel && msg.channel) {
          this._channels.delete(msg.channel);
          byChannel._onExit(msg);
        }
        break;
      case 'error':
        this._onErrorMessage(msg, byReq ?? byChannel);
        break;
      case 'detached':
        // Unasked, with an error: a relay lost the owner; resume on this connection.
        if (byChannel && msg.channel && msg.error && msg.req === undefined) {
          this._channels.delete(msg.channel);
          byChannel._onDetached(msg);
        }
        break;
      case 'auth-expiring':
        this._transport.reauth();
        break;
      default:
        break; // pong, ok, a late hello; unknown types are ignored, as the protocol asks
    }
  }

  /**
   * _onAttached binds the channel to the execution that asked; a channel
   * nobody wants any more (detached or closed meanwhile) is detached.
   * @param {Message} msg
   * @param {Execution | undefined} ex
   */
  _onAttached(msg, ex) {
    if (msg.req !== undefined) this._pending.delete(msg.req);
    if (!ex || ex.closed || !msg.channel) {
      if (msg.channel) this._transport.send({ type: 'detach', channel: msg.channel });
      return;
    }
    this._channels.set(msg.channel, ex);
    ex._onAttached(msg);
  }

  /**
   * @param {Message} msg
   * @param {Execution | undefined} ex
   */
  _onErrorMessage(msg, ex) {
    if (msg.req !== undefined && this._pending.get(msg.req) === ex) this._pending.delete(msg.req);
    if (!ex) {
      this._emit('error', { error: msg.error, message: msg.message ?? '' });
      return;
    }
    ex._onError(msg);
  }
}

function defaultURL() {
  const loc = globalThis.location;
  if (!loc) return '';
  return (loc.protocol === 'https:' ? 'wss://' : 'ws://') + loc.host + '/v1/connect';
}
