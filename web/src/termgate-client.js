// termgate-client.js: the browser side of termgate's wire protocol v1
// (gateway/PROTOCOL.md). It holds one WebSocket, multiplexes executions over
// it, and hides disconnects: it reconnects with backoff, reattaches each
// execution after the last event it delivered and resends the input the
// gateway lacks. See web/CLIENT.md. No DOM: it needs only WebSocket.

/** Subprotocol of wire protocol v1. */
export const SUBPROTOCOL = 'termgate.v1';
/** Prefix of the subprotocol entry that carries the token. */
export const BEARER_PREFIX = 'termgate.bearer.';

const FRAME_OUTPUT = 0x01;
const FRAME_INPUT = 0x02;
const OUTPUT_HEADER = 26;
const INPUT_HEADER = 13;

// Input pacing (PROTOCOL.md): frames of at most 16 KiB, at most a window
// of 64 KiB (the gateway's input queue) per send, sends at least 20 ms
// apart (writes meanwhile go out together); after a refusal, one window
// per pause until a pause passes without a refusal or all was sent. The
// pause is 200 ms after a refusal showing progress and doubles, to 3.2 s,
// after one that does not.
const INPUT_FRAME_MAX = 16 << 10;
const INPUT_WINDOW = 64 << 10;
const INPUT_GAP_MS = 20;
const INPUT_PAUSE_MS = 200;
const INPUT_PAUSE_MAX_MS = 3200;

/** Names of output streams by their number in an output frame. */
export const STREAMS = Object.freeze({ 1: 'pty', 2: 'stdout', 3: 'stderr' });

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
 * @property {number} [maxUnackedInput] bytes of sent input kept for resending (4 MiB).
 * @property {typeof WebSocket} [WebSocket] constructor to use (tests, node).
 */

/**
 * @typedef {'connecting' | 'live' | 'reconnecting' | 'closed'} ConnectionState
 * @typedef {{state: ConnectionState, delay?: number, attempt?: number, reason?: string}} StatusChange
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
 */

/**
 * @typedef {object} Message a control message of PROTOCOL.md; which fields
 *   are present depends on its type.
 * @property {string} type
 * @property {string} [req]
 * @property {number} [channel]
 * @property {string} [id]
 * @property {number} [seq]
 * @property {string} [status]
 * @property {boolean} [pty]
 * @property {boolean} [read_only]
 * @property {number} [last_seq]
 * @property {number} [input_offset]
 * @property {number} [from]
 * @property {number} [to]
 * @property {number} [bytes]
 * @property {number} [code]
 * @property {string} [signal]
 * @property {string} [reason]
 * @property {string} [error]
 * @property {string} [message]
 */

/**
 * @typedef {object} StartMessage the start request an Execution resends
 *   until the gateway answers it.
 * @property {'start'} type
 * @property {string} id
 * @property {boolean} attach
 * @property {string} [req]
 * @property {{rows: number, cols: number}} [pty]
 */

/**
 * @typedef {{channel: number, seq: number, stream: number, offset: number, data: Uint8Array}} OutputFrame
 * @typedef {{code: number, signal: string, reason: string, seq: number}} ExitInfo
 */

/** A minimal event emitter: on() returns a function that unsubscribes. */
class Emitter {
  constructor() {
    /** @type {Map<string, Set<Function>>} */
    this._handlers = new Map();
  }

  /**
   * on subscribes fn to the event name.
   * @param {string} name
   * @param {Function} fn
   * @returns {() => void} unsubscribe
   */
  on(name, fn) {
    let set = this._handlers.get(name);
    if (!set) this._handlers.set(name, (set = new Set()));
    set.add(fn);
    return () => { set.delete(fn); };
  }

  /** @param {string} name @param {...any} args */
  _emit(name, ...args) {
    for (const fn of [...(this._handlers.get(name) ?? [])]) {
      try {
        fn(...args);
      } catch (err) {
        // A listener's bug must not break the protocol state machine.
        console.error(`termgate: ${name} listener failed`, err);
      }
    }
  }
}

/**
 * decodeOutput parses an output frame. It returns null for a frame that is
 * not output, and throws when the bytes are fewer or more than the length
 * field says (a message cut short by a failing connection).
 * @param {ArrayBuffer} buf
 * @returns {OutputFrame | null}
 */
export function decodeOutput(buf) {
  if (buf.byteLength < 1) return null;
  const v = new DataView(buf);
  if (v.getUint8(0) !== FRAME_OUTPUT) return null;
  if (buf.byteLength < OUTPUT_HEADER) throw new Error(`termgate: output frame of ${buf.byteLength} bytes has no full header`);
  const length = v.getUint32(22);
  if (length !== buf.byteLength - OUTPUT_HEADER) {
    throw new Error(`termgate: output frame holds ${buf.byteLength - OUTPUT_HEADER} bytes, its header says ${length}`);
  }
  return {
    channel: v.getUint32(1),
    seq: Number(v.getBigUint64(5)),
    stream: v.getUint8(13),
    offset: Number(v.getBigUint64(14)),
    data: new Uint8Array(buf, OUTPUT_HEADER, length),
  };
}

/**
 * encodeInput builds an input frame.
 * @param {number} channel
 * @param {number} offset input bytes sent before these
 * @param {Uint8Array} data
 * @returns {Uint8Array<ArrayBuffer>}
 */
export function encodeInput(channel, offset, data) {
  const out = new Uint8Array(INPUT_HEADER + data.length);
  const v = new DataView(out.buffer);
  v.setUint8(0, FRAME_INPUT);
  v.setUint32(1, channel);
  v.setBigUint64(5, BigInt(offset));
  out.set(data, INPUT_HEADER);
  return out;
}

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

function randomID() {
  const b = new Uint8Array(12);
  crypto.getRandomValues(b);
  return 'web-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

/**
 * Execution is one execution as this client sees it: started or attached,
 * followed across reconnects until its exit, a fatal error or detach().
 *
 * Events (subscribe with on):
 *  - 'output' (bytes: Uint8Array, stream: 'pty'|'stdout'|'stderr', seq: number)
 *  - 'event' (msg): started, resize, stdin-closed, signal events
 *  - 'gap' ({from, to, bytes}): output the gateway no longer held
 *  - 'exit' ({code, signal, reason, seq})
 *  - 'attached' (msg): on every (re)attach; replay runs until msg.last_seq
 *  - 'replay' (replaying: boolean): history replay began or caught up
 *  - 'error' ({error, message, fatal}): fatal ends the execution here
 *  - 'closed' (): no more events will come
 */
export class Execution extends Emitter {
  /**
   * @param {TermgateClient} client
   * @param {{start?: StartMessage, id?: string, readOnly?: boolean}} how
   */
  constructor(client, how) {
    super();
    this._client = client;
    /** @type {StartMessage | null} the start message, resent verbatim until started */
    this._start = how.start ?? null;
    this._startedKnown = false;
    /** The execution's canonical ID (known once started). */
    this.id = how.start ? how.start.id : (how.id ?? '');
    /** Whether this client asked to attach read-only. */
    this.wantReadOnly = !!how.readOnly;
    /** Whether the gateway attached the channel read-only. */
    this.readOnly = this.wantReadOnly;
    /** Whether the execution has a PTY (known once attached). */
    this.pty = !!how.start?.pty;
    /** The gateway's status of the execution at the last attach. */
    this.status = '';
    /** Last sequence number delivered to listeners. */
    this.lastSeq = 0;
    /** @type {number | null} channel on the current connection */
    this.channel = null;
    /** Whether events up to the attach's last_seq are still being replayed. */
    this.replaying = false;
    this._replayUntil = 0;
    /** @type {ExitInfo | null} */
    this.exit = null;
    this.closed = false;
    // Input: _input holds what was written and not yet known to be
    // received, in chunks of at most INPUT_FRAME_MAX bytes. _inputBase is
    // the offset of _input[0], _inputEnd the offset after the last byte
    // written, _sendAt the offset of the next byte to send.
    /** @type {Uint8Array[]} */
    this._input = [];
    this._inputBase = 0;
    this._inputEnd = 0;
    this._sendAt = 0;
    /** The largest input offset the gateway reported having. */
    this._acked = 0;
    /** @type {Uint8Array | null} the buffer behind the last chunk, filled up to _tailLen */
    this._tail = null;
    this._tailLen = 0;
    this._stdinClosed = false;
    /** Whether close-stdin waits for the input before it to be sent. */
    this._closePending = false;
    /** @type {ReturnType<typeof setTimeout> | undefined} the next paced send */
    this._flushTimer = undefined;
    /** Between windows while recovering from a refusal. */
    this._pause = 0;
    this._recovering = false;
    /** Largest offset reported by refusals since the last rewind, or -1. */
    this._refusedAt = -1;
    /** Offset the previous round of refusals reported: progress shows here. */
    this._lastRefusal = -1;
    /** @type {{rows: number, cols: number} | null} */
    this._size = how.start?.pty ? { ...how.start.pty } : null;
    this._sizeSent = !!how.start?.pty;
  }

  /**
   * write sends input (a string is UTF-8 encoded). It is kept until the
   * gateway confirms it, and resent by offset after a disconnect or a
   * refusal, so it is applied exactly once. Input goes out paced to the
   * gateway's input queue. A write that would make the unsent input
   * exceed maxUnackedInput is dropped whole, with an 'error' event
   * (input_overflow). Ignored when read-only.
   * @param {string | Uint8Array} data
   * @returns {boolean} whether the input was taken
   */
  write(data) {
    if (this.closed || this.readOnly || this._stdinClosed) return false;
    const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data;
    if (bytes.length === 0) return true;
    if (this._inputEnd - this._sendAt + bytes.length > this._client._opts.maxUnackedInput) {
      const message = `${bytes.length} bytes of input were dropped: the input not sent yet is at its bound`;
      this._emit('error', { error: 'input_overflow', message, fatal: false });
      return false;
    }
    this._keep(bytes);
    if (this._flushTimer === undefined) this._flush();
    return true;
  }

  /** closeStdin ends the execution's input after everything written (pipes only). */
  closeStdin() {
    if (this.closed || this.readOnly || this._stdinClosed) return;
    this._stdinClosed = true;
    this._closePending = true;
    if (this._flushTimer === undefined) this._flush();
  }

  /**
   * resize asks for a new terminal size; sent now, or on the next attach.
   * @param {number} rows
   * @param {number} cols
   */
  resize(rows, cols) {
    if (this._size && this._size.rows === rows && this._size.cols === cols) return;
    this._size = { rows, cols };
    this._sizeSent = false;
    this._flushSize();
  }

  /** @param {string} name INT TERM HUP KILL QUIT USR1 USR2 WINCH CONT STOP */
  signal(name) {
    if (this.channel !== null && !this.readOnly) this._client._send({ type: 'signal', channel: this.channel, signal: name });
  }

  /** cancel stops the execution: SIGTERM, then SIGKILL after the grace period. */
  cancel() {
    if (this.id && !this.readOnly) this._client._send({ type: 'cancel', id: this.id });
  }

  /** detach stops following the execution; it keeps running on the gateway. */
  detach() {
    if (this.closed) return;
    if (this.channel !== null) this._client._send({ type: 'detach', channel: this.channel });
    this._close();
  }

  // --- driven by the client ---

  /** @returns {Record<string, unknown>} the message that (re)attaches this execution */
  _attachMessage() {
    if (this._start && !this._startedKnown) return { ...this._start };
    /** @type {Record<string, unknown>} */
    const m = { type: 'attach', id: this.id, after: this.lastSeq };
    if (this.wantReadOnly) m.read_only = true;
    return m;
  }

  /** @param {Message} msg */
  _onStarted(msg) {
    this._startedKnown = true;
    this.id = msg.id ?? this.id;
    this.pty = !!msg.pty;
  }

  /** @param {Message} msg */
  _onAttached(msg) {
    this.channel = msg.channel ?? null;
    this.id = msg.id ?? this.id;
    this.status = msg.status ?? '';
    this.pty = !!msg.pty;
    this.readOnly = !!msg.read_only;
    this._startedKnown = true;
    this._replayUntil = msg.last_seq ?? 0;
    this._setReplaying(this._replayUntil > this.lastSeq);
    this._emit('attached', msg);
    if (!this.readOnly) {
      this._rewind(msg.input_offset ?? 0);
      this._closePending = this._stdinClosed;
      this._flush();
      this._sizeSent = false;
      this._flushSize();
    }
  }

  /** @param {boolean} on */
  _setReplaying(on) {
    if (this.replaying === on) return;
    this.replaying = on;
    this._emit('replay', on);
  }

  /**
   * _advance records seq as delivered; false when it was delivered already,
   * or when events before it are missing. Events are numbered without holes
   * and a range the gateway no longer holds comes as a gap: a jump means
   * messages were lost on the way, so the connection is dropped and the
   * execution resumes after lastSeq.
   * @param {number} seq
   */
  _advance(seq) {
    if (seq <= this.lastSeq) return false;
    if (seq > this.lastSeq + 1) {
      this._client._drop(`events ${this.lastSeq + 1} to ${seq - 1} missing`);
      return false;
    }
    this.lastSeq = seq;
    return true;
  }

  _afterEvent() {
    if (this.replaying && this.lastSeq >= this._replayUntil) this._setReplaying(false);
  }

  /** @param {OutputFrame} frame */
  _onOutput(frame) {
    if (!this._advance(frame.seq)) return;
    const stream = /** @type {Record<number, string>} */ (STREAMS)[frame.stream] ?? String(frame.stream);
    this._emit('output', frame.data, stream, frame.seq);
    this._afterEvent();
  }

  /** @param {Message} msg */
  _onEvent(msg) {
    if (!this._advance(msg.seq ?? 0)) return;
    this._emit('event', msg);
    this._afterEvent();
  }

  /** @param {Message} msg */
  _onGap(msg) {
    const from = msg.from ?? 0;
    const to = msg.to ?? 0;
    // The events before msg.to are gone: resume after them next time.
    if (to - 1 > this.lastSeq) this.lastSeq = to - 1;
    this._emit('gap', { from, to, bytes: msg.bytes ?? 0 });
    this._afterEvent();
  }

  /** @param {Message} msg */
  _onExit(msg) {
    const seq = msg.seq ?? 0;
    if (!this._advance(seq)) return;
    this.exit = { code: msg.code ?? -1, signal: msg.signal ?? '', reason: msg.reason ?? 'exited', seq };
    this.status = 'ended';
    this._setReplaying(false);
    this._emit('exit', this.exit);
    this._close();
  }

  /**
   * @param {Message} msg
   * @param {boolean} fatal
   */
  _onError(msg, fatal) {
    this._emit('error', { error: msg.error, message: msg.message ?? '', fatal });
    if (fatal) this._close();
  }

  _onDisconnect() {
    this.channel = null;
    this._setReplaying(false);
    this._stopPacing(); // the reattach resends from what the gateway has
  }

  _close() {
    if (this.closed) return;
    this.closed = true;
    this._stopPacing();
    this.channel = null;
    this._input = [];
    this._client._forget(this);
    this._emit('closed');
  }

  _stopPacing() {
    clearTimeout(this._flushTimer);
    this._flushTimer = undefined;
    this._refusedAt = this._lastRefusal = -1;
    this._pause = 0;
    this._recovering = false;
  }

  /**
   * _arm schedules the next paced send after ms, replacing a due one.
   * @param {number} ms
   */
  _arm(ms) {
    clearTimeout(this._flushTimer);
    this._flushTimer = setTimeout(() => this._paced(), ms);
  }

  /** _paced: after refusals, rewind to what the gateway has; then send. */
  _paced() {
    this._flushTimer = undefined;
    if (this._refusedAt >= 0) {
      this._rewind(this._refusedAt);
      this._refusedAt = -1;
    } else {
      this._recovering = false; // a pause passed without a refusal
    }
    this._flush();
  }

  /**
   * _keep appends written bytes to the kept input, filling a tail buffer
   * of INPUT_FRAME_MAX bytes before starting another, and drops the oldest
   * sent bytes beyond maxUnackedInput.
   * @param {Uint8Array} bytes
   */
  _keep(bytes) {
    for (let at = 0; at < bytes.length;) {
      const last = this._input.at(-1);
      if (!this._tail || !last || last.buffer !== this._tail.buffer || this._tailLen === INPUT_FRAME_MAX) {
        this._tail = new Uint8Array(INPUT_FRAME_MAX);
        this._tailLen = 0;
        this._input.push(this._tail.subarray(0, 0));
      }
      const n = Math.min(bytes.length - at, INPUT_FRAME_MAX - this._tailLen);
      this._tail.set(bytes.subarray(at, at + n), this._tailLen);
      this._tailLen += n;
      this._input[this._input.length - 1] = this._tail.subarray(0, this._tailLen);
      at += n;
    }
    this._inputEnd += bytes.length;
    const max = this._client._opts.maxUnackedInput;
    while (this._inputEnd - this._inputBase > max && this._input.length > 1 &&
      this._inputBase + this._input[0].length <= this._sendAt) {
      this._inputBase += this._input[0].length;
      this._input.shift();
    }
  }

  /**
   * _bytes copies the kept input between offsets from and to, walking from
   * the newest chunk: sends are near the end.
   * @param {number} from
   * @param {number} to
   */
  _bytes(from, to) {
    const out = new Uint8Array(to - from);
    let end = this._inputEnd;
    for (let i = this._input.length - 1; i >= 0 && end > from; i--) {
      const chunk = this._input[i];
      const pos = end - chunk.length;
      if (pos < to) {
        const a = Math.max(from, pos);
        out.set(chunk.subarray(a - pos, Math.min(to, end) - pos), a - from);
      }
      end = pos;
    }
    return out;
  }

  /**
   * _flush sends unsent input, at most INPUT_WINDOW bytes in frames of at
   * most INPUT_FRAME_MAX, and arms the next paced send. With nothing left
   * to send, a pending close-stdin goes out.
   */
  _flush() {
    this._flushTimer = undefined;
    const channel = this.channel;
    if (channel === null || this.closed || this.readOnly) return;
    if (this._sendAt < this._inputEnd) {
      const from = this._sendAt;
      const to = Math.min(this._inputEnd, from + INPUT_WINDOW);
      const data = this._bytes(from, to);
      for (let at = 0; at < data.length; at += INPUT_FRAME_MAX) {
        this._client._sendBinary(encodeInput(channel, from + at, data.subarray(at, at + INPUT_FRAME_MAX)));
      }
      this._sendAt = to;
      const gap = this._recovering ? this._pause : INPUT_GAP_MS;
      if (to === this._inputEnd) this._recovering = false;
      this._arm(gap);
    } else if (this._closePending) {
      this._closePending = false;
      this._client._send({ type: 'close-stdin', channel, input_offset: this._inputEnd });
    }
  }

  /**
   * _rewind restarts sending from offset, the input the gateway has.
   * @param {number} offset
   */
  _rewind(offset) {
    offset = Math.max(offset, this._acked); // a stale report never moves back
    this._acked = offset;
    if (offset >= this._inputEnd) {
      // The gateway has all we wrote (or more, from another writer):
      // number our next bytes after what it has.
      this._input = [];
      this._inputBase = this._inputEnd = this._sendAt = offset;
      return;
    }
    if (offset < this._inputBase) {
      // Bytes between offset and what we kept were dropped by the bound:
      // they are lost. What we kept follows what the gateway has.
      const lost = this._inputBase - offset;
      this._emit('error', { error: 'input_lost', message: `${lost} bytes of input were lost`, fatal: false });
      this._inputBase -= lost;
      this._inputEnd -= lost;
    }
    while (this._input.length > 0 && this._inputBase + this._input[0].length <= offset) {
      this._inputBase += this._input[0].length;
      this._input.shift();
    }
    this._sendAt = offset;
  }

  /**
   * _onRefused handles input the gateway refused (queue full, ahead of
   * what it has, rate limited): after a pause, send again from the largest
   * offset reported, one window per pause. The first refusal after a
   * rewind sets the pause: 200 ms after progress, doubled without.
   * @param {string} code
   * @param {number} offset
   */
  _onRefused(code, offset) {
    if (this.channel === null || this.closed) return;
    if (code === 'input_offset' && this._stdinClosed) this._closePending = true; // perhaps close-stdin's
    if (this._refusedAt < 0) {
      const progress = offset > this._lastRefusal;
      this._pause = this._pause < INPUT_PAUSE_MS || progress ? INPUT_PAUSE_MS : Math.min(2 * this._pause, INPUT_PAUSE_MAX_MS);
      this._lastRefusal = offset;
      this._recovering = true;
    }
    this._refusedAt = Math.max(this._refusedAt, offset);
    this._arm(this._pause);
  }

  _flushSize() {
    if (this._sizeSent || !this._size || this.channel === null || this.readOnly || !this.pty) return;
    this._sizeSent = true;
    this._client._send({ type: 'resize', channel: this.channel, rows: this._size.rows, cols: this._size.cols });
  }
}

/** The StartOptions a start message carries besides its id. */
const START_FIELDS = new Set(['command', 'args', 'env', 'cwd', 'pty', 'timeout_ms', 'limits']);

/** Error codes refusing input, which is then resent after a pause. */
const INPUT_REFUSED = new Set(['input_full', 'input_offset', 'rate_limited']);

/** Error codes after which an execution cannot be followed any more. */
const FATAL = new Set(['not_found', 'forbidden', 'conflict', 'invalid_id', 'invalid_spec', 'unenforceable',
  'capacity', 'too_many_channels', 'failed', 'unauthorized']);

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
    this._opts = {
      minDelay: 250, maxDelay: 10000, pingInterval: 20000, maxUnackedInput: 4 << 20,
      url: defaultURL(), WebSocket: globalThis.WebSocket, ...opts,
    };
    if (typeof this._opts.getToken !== 'function') throw new TypeError('termgate: getToken is required');
    /** @type {WebSocket | null} */
    this._ws = null;
    this._live = false;
    this._attempt = 0;
    this._reqSeq = 0;
    /** @type {Map<string, Execution>} req -> execution awaiting an answer */
    this._pending = new Map();
    /** @type {Map<number, Execution>} */
    this._channels = new Map();
    /** @type {Set<Execution>} */
    this._executions = new Set();
    /** How many WebSocket connections this client has opened. */
    this.connections = 0;
    /** @type {StatusChange} */
    this.status = { state: 'connecting' };
    this._closed = false;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    this._timer = undefined;
    /** @type {ReturnType<typeof setInterval> | undefined} */
    this._pingTimer = undefined;
    this._awaitingPong = false;
    this._connect();
  }

  /**
   * start starts an execution and attaches to it.
   * @param {StartOptions} [spec]
   * @returns {Execution}
   */
  start(spec = {}) {
    const { id, ...rest } = spec;
    /** @type {StartMessage} */
    const msg = { type: 'start', id: id ?? randomID(), attach: true };
    for (const [k, v] of Object.entries(rest)) {
      if (START_FIELDS.has(k) && v !== undefined) Object.assign(msg, { [k]: v });
    }
    return this._follow(new Execution(this, { start: msg }));
  }

  /**
   * attach follows an existing execution from its first retained event.
   * @param {string} id
   * @param {{readOnly?: boolean, after?: number}} [opts]
   * @returns {Execution}
   */
  attach(id, opts = {}) {
    const ex = new Execution(this, { id, readOnly: opts.readOnly });
    ex.lastSeq = opts.after ?? 0;
    return this._follow(ex);
  }

  /** close detaches everything and stops reconnecting. */
  close() {
    if (this._closed) return;
    for (const ex of [...this._executions]) ex.detach();
    this._closed = true;
    clearTimeout(this._timer);
    this._stopPing();
    this._ws?.close(1000);
    this._ws = null;
    this._setStatus({ state: 'closed' });
  }

  /** @param {Execution} ex */
  _follow(ex) {
    this._executions.add(ex);
    if (this._live) this._sendAttach(ex);
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
    this._send(msg);
  }

  /** @param {StatusChange} s */
  _setStatus(s) {
    this.status = s;
    this._emit('status', s);
  }

  async _connect() {
    if (this._closed) return;
    this._setStatus({ state: 'connecting', attempt: this._attempt });
    let token;
    try {
      token = await this._opts.getToken();
    } catch (err) {
      this._emit('error', { error: 'token', message: String(err) });
      this._scheduleReconnect();
      return;
    }
    if (this._closed) return;
    if (token === null) {
      this._closed = true;
      this._setStatus({ state: 'closed', reason: 'no token' });
      return;
    }
    const protocols = [SUBPROTOCOL];
    if (token) protocols.push(BEARER_PREFIX + token);
    let ws;
    try {
      ws = new this._opts.WebSocket(this._opts.url, protocols);
    } catch (err) {
      this._emit('error', { error: 'connect', message: String(err) });
      this._scheduleReconnect();
      return;
    }
    this.connections++;
    ws.binaryType = 'arraybuffer';
    this._ws = ws;
    ws.onopen = () => this._ws === ws && this._onOpen();
    ws.onmessage = (e) => this._ws === ws && this._onMessage(e.data);
    ws.onclose = (e) => this._ws === ws && this._drop(`closed ${e.code}`);
    ws.onerror = () => this._ws === ws && this._drop('socket error');
  }

  _onOpen() {
    this._live = true;
    this._attempt = 0;
    this._setStatus({ state: 'live' });
    this._startPing();
    for (const ex of this._executions) this._sendAttach(ex);
  }

  /**
   * _drop abandons the current socket and schedules a reconnect.
   * @param {string} why
   */
  _drop(why) {
    const ws = this._ws;
    this._ws = null;
    this._live = false;
    this._stopPing();
    if (ws && ws.readyState <= 1) {
      try { ws.close(1000); } catch { /* already failing */ }
    }
    this._pending.clear();
    this._channels.clear();
    for (const ex of this._executions) ex._onDisconnect();
    if (!this._closed) this._scheduleReconnect(why);
  }

  /** @param {string} [why] */
  _scheduleReconnect(why) {
    const delay = backoffDelay(this._attempt++, this._opts.minDelay, this._opts.maxDelay);
    this._setStatus({ state: 'reconnecting', delay, attempt: this._attempt, reason: why });
    clearTimeout(this._timer);
    this._timer = setTimeout(() => this._connect(), delay);
  }

  _startPing() {
    this._stopPing();
    this._awaitingPong = false;
    this._pingTimer = setInterval(() => {
      if (this._awaitingPong) {
        this._drop('no pong');
        return;
      }
      this._awaitingPong = true;
      this._send({ type: 'ping' });
    }, this._opts.pingInterval);
  }

  _stopPing() {
    clearInterval(this._pingTimer);
    this._pingTimer = undefined;
  }

  /** @param {Record<string, unknown>} msg */
  _send(msg) {
    if (this._live && this._ws) this._ws.send(JSON.stringify(msg));
  }

  /** @param {Uint8Array<ArrayBuffer>} bytes */
  _sendBinary(bytes) {
    if (this._live && this._ws) this._ws.send(bytes);
  }

  /** @param {string | ArrayBuffer} data */
  _onMessage(data) {
    this._awaitingPong = false; // any traffic shows the socket is alive
    if (typeof data === 'string') {
      let msg;
      try {
        msg = JSON.parse(data);
      } catch {
        this._drop('malformed control message');
        return;
      }
      this._onControl(msg);
      return;
    }
    let frame;
    try {
      frame = decodeOutput(data);
    } catch {
      this._drop('truncated output frame'); // resume after the last complete event
      return;
    }
    if (frame) this._channels.get(frame.channel)?._onOutput(frame);
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
        if (msg.req !== undefined) this._pending.delete(msg.req);
        if (!byReq || byReq.closed || !msg.channel) {
          if (msg.channel) this._send({ type: 'detach', channel: msg.channel });
          break;
        }
        this._channels.set(msg.channel, byReq);
        byReq._onAttached(msg);
        break;
      case 'event':
        byChannel?._onEvent(msg);
        break;
      case 'gap':
        byChannel?._onGap(msg);
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
      case 'auth-expiring':
        this._reauth();
        break;
      case 'pong':
      case 'ok':
      case 'detached':
        break;
      default:
        break; // unknown types are ignored, as the protocol asks
    }
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
    if (INPUT_REFUSED.has(msg.error ?? '')) {
      ex._onRefused(msg.error ?? '', msg.input_offset ?? 0);
      return;
    }
    ex._onError(msg, FATAL.has(msg.error ?? '') && ex.channel === null);
  }

  async _reauth() {
    const ws = this._ws;
    let token;
    try {
      token = await this._opts.getToken();
    } catch (err) {
      this._emit('error', { error: 'token', message: String(err) });
      return;
    }
    if (this._ws === ws && token) this._send({ type: 'reauth', token });
  }
}

function defaultURL() {
  const loc = globalThis.location;
  if (!loc) return '';
  return (loc.protocol === 'https:' ? 'wss://' : 'ws://') + loc.host + '/v1/connect';
}
