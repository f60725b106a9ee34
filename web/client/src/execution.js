// execution.js: one execution as the client follows it, over whatever
// connection the client has: attach and reattach, delivery of its events
// in order and once, its input (an InputQueue) and its controls.

import { Emitter } from './emitter.js';
import { InputQueue } from './input.js';
import { STREAMS, FATAL_ERRORS, INPUT_REFUSED_ERRORS, encodeInput } from './wire.js';
import { backoffDelay } from './transport.js';

/**
 * @typedef {import('./wire.js').Message} Message
 * @typedef {import('./wire.js').OutputFrame} OutputFrame
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
 * @typedef {{code: number, signal: string, reason: string, seq: number}} ExitInfo
 */

/**
 * @typedef {object} Link the part of the client an Execution uses.
 * @property {(msg: Record<string, unknown>) => void} send sends a control
 *   message on the current connection; dropped while there is none
 * @property {(bytes: Uint8Array<ArrayBuffer>) => void} sendBinary sends a binary frame likewise
 * @property {(why: string) => void} drop abandons the connection: events were lost on the way
 * @property {(ex: Execution) => void} forget the execution is closed: stop following it
 * @property {() => string[]} features the features the gateway's hello listed on this connection
 * @property {(ex: Execution) => void} reattach sends the execution's attach again on the current
 *   connection (none while there is none: the next connection's opening sends it)
 */

/**
 * Acknowledgement of output: on a channel served with ack, the client
 * acks once listeners were handed ACK_BYTES of output since the last
 * ack, or ACK_DELAY_MS after the first event handed since it.
 */
const ACK_BYTES = 64 << 10;
const ACK_DELAY_MS = 25;

/**
 * Resuming through an unavailable owner: the attach is asked again after
 * max(retry_ms, a backoff from RETRY_MIN_MS doubling up to RETRY_MAX_MS).
 */
const RETRY_MIN_MS = 250;
const RETRY_MAX_MS = 10000;

const FATAL = new Set(FATAL_ERRORS);
const INPUT_REFUSED = new Set(INPUT_REFUSED_ERRORS);

/**
 * Execution is one execution as this client sees it: started or attached,
 * followed across reconnects until its exit, a fatal error or detach().
 *
 * Events (subscribe with on):
 *  - 'output' (bytes: Uint8Array, stream: 'pty'|'stdout'|'stderr', seq: number)
 *  - 'event' (msg): started, resize, stdin-closed, signal and notice events;
 *    a notice (msg.event 'notice') has reason ('timeout', 'idle_timeout',
 *    'idle_timeout_cancelled', or another to show by its message), message
 *    (for people) and at (RFC 3339: when the timeout fires; absent when
 *    nothing is due)
 *  - 'gap' ({from, to, bytes, cause, inexact}): output the gateway no
 *    longer held for this client; cause says why (read_only, live,
 *    hold_expired, unheld, or '' from a gateway that does not say),
 *    inexact that bytes is only an upper bound
 *  - 'exit' ({code, signal, reason, seq})
 *  - 'ports' ([{address, port}]): with the ports option, the TCP ports the
 *    execution's programs listen on, at once and whenever they change.
 *  - 'snapshot' ({data, rows, cols, seq, from, to, bytes, cause}): with the
 *    snapshot option, the terminal's screen in place of history the gateway
 *    no longer holds: reset the terminal and write data, then what follows
 *  - 'attached' (msg): on every (re)attach; replay runs until msg.last_seq
 *  - 'replay' (replaying: boolean): history replay began or caught up
 *  - 'error' ({error, message, fatal, retry_ms}): fatal ends the execution here;
 *    unavailable (its node does not answer) is retried after retry_ms
 *  - 'closed' (): no more events will come
 *
 * Methods whose names begin with an underscore are the client's: it calls
 * them as the connection comes and goes and as messages for the execution
 * arrive.
 */
export class Execution extends Emitter {
  /**
   * @param {Link} link
   * @param {{start?: StartMessage, id?: string, readOnly?: boolean, after?: number, incarnation?: string, snapshot?: boolean, ports?: boolean}} how
   * @param {number} maxUnackedInput bytes of input kept (ClientOptions)
   */
  constructor(link, how, maxUnackedInput) {
    super();
    this._link = link;
    /** @type {StartMessage | null} the start message, resent verbatim until started */
    this._start = how.start ?? null;
    this._startedKnown = false;
    /** The execution's canonical ID (known once started). */
    this.id = how.start ? how.start.id : (how.id ?? '');
    /** Whether this client asked to attach read-only. */
    this.wantReadOnly = !!how.readOnly;
    /** Whether to ask for a screen snapshot in place of evicted terminal history. */
    this.wantSnapshot = !!how.snapshot;
    /** Whether to be told the ports the execution's programs listen on ('ports'). */
    this.wantPorts = !!how.ports;
    /** @type {{address: string, port: number}[]} the ports it listens on, as last told */
    this.ports = [];
    /** Whether the gateway attached the channel read-only. */
    this.readOnly = this.wantReadOnly;
    /** Whether the execution has a PTY (known once attached). */
    this.pty = !!how.start?.pty;
    /** The gateway's status of the execution at the last attach. */
    this.status = '';
    /** Last sequence number delivered to listeners. */
    this.lastSeq = how.after ?? 0;
    /** Output bytes up to lastSeq (events' data plus gaps' bytes), as the gateway counts them. */
    this.seen = 0;
    /** Whether seen is exact: counted from the first event, or from a gap. */
    this._seenKnown = !how.after;
    /** The incarnation the gateway named at the last attach, or the one `after` belongs to ('' if none). */
    this.incarnation = how.incarnation ?? '';
    /** Whether the channel is served with acknowledged delivery. */
    this.ack = false;
    this._acked = 0;
    this._unacked = 0;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    this._ackTimer = undefined;
    /** @type {ReturnType<typeof setTimeout> | undefined} the next attach after unavailable */
    this._retryTimer = undefined;
    /** Attaches answered unavailable in a row: the backoff's attempt. */
    this._unavailable = 0;
    /** The newest sequence processed, in order: what may be acked. */
    this._processed = 0;
    /** @type {{seq: number, bytes: number, done: boolean}[]} handed, not all processed */
    this._pending = [];
    /** @type {{seq: number, bytes: number, done: boolean} | null} the event being handed */
    this._handing = null;
    /** @type {number | null} channel on the current connection */
    this.channel = null;
    /** Whether events up to the attach's last_seq are still being replayed. */
    this.replaying = false;
    this._replayUntil = 0;
    /** @type {ExitInfo | null} */
    this.exit = null;
    this.closed = false;
    this._input = new InputQueue(maxUnackedInput, {
      frame: (offset, data) => this._sendInput(offset, data),
      closeStdin: (offset) => this._link.send({ type: 'close-stdin', channel: this.channel, input_offset: offset }),
      lost: (n) => this._emit('error', { error: 'input_lost', message: `${n} bytes of input were lost`, fatal: false }),
    });
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
    if (this.closed || this.readOnly || this._input.stdinClosed) return false;
    const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data;
    if (bytes.length === 0) return true;
    if (!this._input.write(bytes)) {
      const message = `${bytes.length} bytes of input were dropped: the input not sent yet is at its bound`;
      this._emit('error', { error: 'input_overflow', message, fatal: false });
      return false;
    }
    return true;
  }

  /**
   * writeAsync sends input like write, but waits for room when the input
   * kept is at its bound (backpressure): the promise resolves true once
   * the input was taken, false if the execution closed first.
   * @param {string | Uint8Array} data
   * @returns {Promise<boolean>}
   */
  writeAsync(data) {
    if (this.closed || this.readOnly || this._input.stdinClosed) return Promise.resolve(false);
    const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data;
    return this._input.writeWhenRoom(bytes);
  }

  /** closeStdin ends the execution's input after everything written (pipes only). */
  closeStdin() {
    if (this.closed || this.readOnly) return;
    this._input.closeStdin();
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
    if (this.channel !== null && !this.readOnly) this._link.send({ type: 'signal', channel: this.channel, signal: name });
  }

  /** cancel stops the execution: SIGTERM, then SIGKILL after the grace period. */
  cancel() {
    if (this.id && !this.readOnly) this._link.send({ type: 'cancel', id: this.id });
  }

  /** detach stops following the execution; it keeps running on the gateway. */
  detach() {
    if (this.closed) return;
    if (this.channel !== null) this._link.send({ type: 'detach', channel: this.channel });
    this._close();
  }

  // --- driven by the client ---

  /** @returns {Record<string, unknown>} the message that (re)attaches this execution */
  _attachMessage() {
    const features = this._link.features();
    if (this._start && !this._startedKnown) {
      /** @type {Record<string, unknown>} */
      const start = { ...this._start };
      if (features.includes('ack')) start.ack = true; // the start's attach acknowledges too
      if (this.wantPorts && features.includes('forward')) start.ports = true;
      return start;
    }
    /** @type {Record<string, unknown>} */
    const m = { type: 'attach', id: this.id, after: this.lastSeq };
    if (this.wantReadOnly) m.read_only = true;
    // A non-zero after needs the incarnation it belongs to: the gateway
    // refuses it alone (the ID may name a new execution since).
    if (this.incarnation) m.incarnation = this.incarnation;
    if (features.includes('ack')) m.ack = true;
    if (features.includes('seen') && this._seenKnown && this.seen > 0) m.seen = this.seen;
    if (this.wantSnapshot && features.includes('snapshot')) m.snapshot = true;
    if (this.wantPorts && features.includes('forward')) m.ports = true;
    return m;
  }

  /**
   * _onPorts takes the ports the execution listens on now.
   * @param {Message & {ports?: {address: string, port: number}[]}} msg
   */
  _onPorts(msg) {
    this.ports = msg.ports ?? [];
    this._emit('ports', this.ports);
  }

  /**
   * _onSnapshot applies a screen snapshot: it stands in for the history
   * the gateway no longer holds, and the execution continues after it.
   * @param {Message} msg
   */
  _onSnapshot(msg) {
    const seq = msg.seq ?? 0;
    if (seq <= this.lastSeq) return;
    this.lastSeq = seq;
    this.seen = msg.seen ?? 0;
    this._seenKnown = true;
    this._emit('snapshot', {
      data: msg.data ?? '', rows: msg.rows ?? 0, cols: msg.cols ?? 0, seq,
      from: msg.from ?? 0, to: msg.to ?? 0, bytes: msg.bytes ?? 0, cause: msg.cause ?? '',
    });
    this._pending.push({ seq, bytes: 0, done: true });
    this._afterEvent();
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
    this._unavailable = 0;
    let inputLost = 0;
    if (this.incarnation && msg.incarnation && msg.incarnation !== this.incarnation) {
      // The ID names a new execution: follow it from its first event.
      this.lastSeq = this.seen = this._acked = this._processed = 0;
      this._pending = [];
      this._seenKnown = true;
      inputLost = this._input.reset(msg.input_offset ?? 0);
    }
    if (msg.incarnation) this.incarnation = msg.incarnation;
    this.ack = !!msg.ack;
    this._input.acking = this.ack && this._link.features().includes('input-ack');
    this._acked = Math.max(this._acked, this.lastSeq);
    this._unacked = 0;
    if (inputLost > 0) this._emit('error', { error: 'input_lost', message: `${inputLost} bytes of input were meant for an execution that ended`, fatal: false });
    this._replayUntil = msg.last_seq ?? 0;
    this._setReplaying(this._replayUntil > this.lastSeq);
    this._emit('attached', msg);
    if (!this.readOnly) {
      this._input.resume(msg.input_offset ?? 0);
      this._sizeSent = false;
      this._flushSize();
    }
  }

  /**
   * defer, called by an 'output' listener, makes the event count as
   * processed only once the returned function is called, for example from
   * xterm's write callback once the terminal has drawn it. The gateway
   * then holds the program back while the terminal is behind, instead of
   * letting its write queue grow. Events are processed in order: a later
   * event is acknowledged only after every earlier one was.
   * @returns {() => void}
   */
  defer() {
    const entry = this._handing;
    if (!entry) return () => {};
    entry.done = false;
    return () => {
      entry.done = true;
      this._drainProcessed();
    };
  }

  /** @param {OutputFrame} frame */
  _onOutput(frame) {
    if (!this._advance(frame.seq)) return;
    const stream = /** @type {Record<number, string>} */ (STREAMS)[frame.stream] ?? String(frame.stream);
    this.seen += frame.data.length;
    this._handing = { seq: frame.seq, bytes: frame.data.length, done: true };
    try {
      this._emit('output', frame.data, stream, frame.seq);
    } finally {
      this._pending.push(this._handing);
      this._handing = null;
    }
    this._afterEvent();
  }

  /** @param {Message} msg */
  _onEvent(msg) {
    if (!this._advance(msg.seq ?? 0)) return;
    this._emit('event', msg);
    this._pending.push({ seq: this.lastSeq, bytes: 0, done: true });
    this._afterEvent();
  }

  /** @param {Message} msg */
  _onGap(msg) {
    const from = msg.from ?? 0;
    const to = msg.to ?? 0;
    // The events before msg.to are gone: resume after them next time.
    if (to - 1 > this.lastSeq) this.lastSeq = to - 1;
    this.seen += msg.bytes ?? 0;
    this._seenKnown = true;
    this._emit('gap', { from, to, bytes: msg.bytes ?? 0, cause: msg.cause ?? '', inexact: !!msg.inexact });
    this._pending.push({ seq: this.lastSeq, bytes: 0, done: true });
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
   * _onError handles an error answering the execution's request or sent
   * on its channel. Refused input is resent; a fatal code answering a
   * start or attach (no channel yet) ends the execution here.
   * @param {Message} msg
   */
  _onError(msg) {
    const code = msg.error ?? '';
    if (code === 'unavailable' && msg.req !== undefined && this.channel === null) {
      this._retryAttach(msg);
      return;
    }
    if (INPUT_REFUSED.has(code)) {
      if (this.channel !== null && !this.closed) this._input.refused(code, msg.input_offset ?? 0);
      return;
    }
    if (msg.req === undefined && this.channel !== null && (code === 'not_attached' || code === 'invalid_request')) {
      return; // the answer to an ack or input frame on a replaced channel: the reattach covers it
    }
    const fatal = FATAL.has(code) && this.channel === null;
    this._emit('error', { error: msg.error, message: msg.message ?? '', fatal });
    if (fatal) this._close();
  }

  /** @param {Message} msg an input-ack */
  _onInputAck(msg) {
    if (this.channel !== null && !this.closed) this._input.acked(msg.input_offset ?? 0, msg.input_end ?? 0);
  }

  /**
   * _onDetached handles a detached the gateway sent unasked, with an error:
   * the node relaying the channel lost the execution's owner after passing
   * on everything it had. The execution attaches again on this connection
   * after the last event delivered; input is resent from the attached
   * input offset.
   * @param {Message} msg
   */
  _onDetached(msg) {
    this._onDisconnect();
    this._emit('error', { error: msg.error, message: msg.message ?? '', fatal: false });
    this._link.reattach(this);
  }

  /**
   * _retryAttach keeps the execution after an unavailable answer to its
   * attach (its node is down or cut off) and asks again later: after
   * retry_ms, or the backoff when longer.
   * @param {Message} msg
   */
  _retryAttach(msg) {
    const delay = Math.max(msg.retry_ms ?? 0, backoffDelay(this._unavailable++, RETRY_MIN_MS, RETRY_MAX_MS));
    this._emit('error', { error: 'unavailable', message: msg.message ?? '', fatal: false, retry_ms: delay });
    clearTimeout(this._retryTimer);
    this._retryTimer = setTimeout(() => {
      this._retryTimer = undefined;
      if (!this.closed && this.channel === null) this._link.reattach(this);
    }, delay);
  }

  _onDisconnect() {
    clearTimeout(this._ackTimer);
    this._ackTimer = undefined;
    clearTimeout(this._retryTimer); // the next connection's opening attaches
    this._retryTimer = undefined;
    this.channel = null;
    this._setReplaying(false);
    this._input.pause(); // the reattach resends from what the gateway has
  }

  // --- internals ---

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
      this._link.drop(`events ${this.lastSeq + 1} to ${seq - 1} missing`);
      return false;
    }
    this.lastSeq = seq;
    return true;
  }

  /** _afterEvent runs once listeners were handed an event. */
  _afterEvent() {
    if (this.replaying && this.lastSeq >= this._replayUntil) this._setReplaying(false);
    this._drainProcessed();
  }

  /**
   * _drainProcessed moves past the events processed in order and acks
   * when due: at once after ACK_BYTES, else by a timer.
   */
  _drainProcessed() {
    let bytes = 0;
    while (this._pending.length > 0 && this._pending[0].done) {
      const e = /** @type {{seq: number, bytes: number}} */ (this._pending.shift());
      this._processed = Math.max(this._processed, e.seq);
      bytes += e.bytes;
    }
    if (!this.ack || this.closed || this.channel === null || this._processed <= this._acked) return;
    this._unacked += bytes;
    if (this._unacked >= ACK_BYTES) this._sendAck();
    else if (this._ackTimer === undefined) this._ackTimer = setTimeout(() => this._sendAck(), ACK_DELAY_MS);
  }

  /** _sendAck acks the newest sequence processed, if not acked yet. */
  _sendAck() {
    clearTimeout(this._ackTimer);
    this._ackTimer = undefined;
    if (!this.ack || this.closed || this.channel === null || this._processed <= this._acked) return;
    this._acked = this._processed;
    this._unacked = 0;
    this._link.send({ type: 'ack', channel: this.channel, seq: this._processed });
  }

  /**
   * @param {number} offset
   * @param {Uint8Array} data
   */
  _sendInput(offset, data) {
    if (this.channel !== null) this._link.sendBinary(encodeInput(this.channel, offset, data));
  }

  _flushSize() {
    if (this._sizeSent || !this._size || this.channel === null || this.readOnly || !this.pty) return;
    this._sizeSent = true;
    this._link.send({ type: 'resize', channel: this.channel, rows: this._size.rows, cols: this._size.cols });
  }

  _close() {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this._ackTimer);
    this._ackTimer = undefined;
    clearTimeout(this._retryTimer);
    this._retryTimer = undefined;
    this._input.stop();
    this.channel = null;
    this._link.forget(this);
    this._emit('closed');
  }
}
