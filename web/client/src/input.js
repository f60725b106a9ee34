// input.js: an execution's input queue, the JavaScript twin of the Go
// client's (gateway/client/input.go): written bytes kept by offset until
// the gateway has them, sent paced to its input queue, resent from what it
// reports after a reconnect or a refusal, and close-stdin after the last.
// On a channel with acknowledged input (input-ack), bytes are kept until
// an input-ack covers them and at most max of them are kept: writes
// beyond wait (writeWhenRoom) or are refused (write).

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

/**
 * @typedef {object} InputSink where an InputQueue's messages go: the
 *   execution's channel on the current connection.
 * @property {(offset: number, data: Uint8Array) => void} frame sends an input frame
 * @property {(offset: number) => void} closeStdin sends close-stdin after offset bytes
 * @property {(bytes: number) => void} lost says that input the gateway lacks is no longer kept
 */

/**
 * InputQueue is an execution's written input. It keeps the bytes from the
 * first one the gateway may lack (base) to the last written (end), in
 * chunks of at most 16 KiB; next is the offset of the next byte to send.
 * It sends only while online: from resume() (an attach) to pause() (a
 * disconnect) or stop() (the end).
 */
export class InputQueue {
  /**
   * @param {number} max bytes of input kept: of sent, unconfirmed input and
   *   of input not sent yet (maxUnackedInput)
   * @param {InputSink} sink
   */
  constructor(max, sink) {
    this._max = max;
    this._sink = sink;
    /** @type {Uint8Array[]} */
    this._chunks = [];
    this._base = 0;
    this._next = 0;
    this._end = 0;
    /** The largest offset the gateway reported having. */
    this._acked = 0;
    /** @type {Uint8Array | null} the buffer behind the last chunk, filled up to _tailLen */
    this._tail = null;
    this._tailLen = 0;
    /** Whether close-stdin was asked for: nothing more can be written. */
    this.stdinClosed = false;
    /** Whether close-stdin waits for the input before it to be sent. */
    this._closePending = false;
    this._online = false;
    /** @type {ReturnType<typeof setTimeout> | undefined} the next paced send */
    this._timer = undefined;
    /** Between windows while recovering from a refusal. */
    this._pause = 0;
    this._recovering = false;
    /** Largest offset reported by refusals since the last rewind, or -1. */
    this._refusedAt = -1;
    /** Offset the previous round of refusals reported: progress shows here. */
    this._lastRound = -1;
    /** Whether the gateway acknowledges input: nothing unacknowledged is dropped. */
    this.acking = false;
    /** @type {{bytes: Uint8Array, resolve: (taken: boolean) => void}[]} writes waiting for room, in order */
    this._waiting = [];
  }

  /** @returns {number} bytes a write may add now */
  _room() {
    return this.acking ? this._max - (this._end - this._base) : this._max - (this._end - this._next);
  }

  /**
   * writeWhenRoom queues bytes once there is room for them, after the
   * writes waiting before it: the promise resolves true when they were
   * taken, false when the queue stopped first.
   * @param {Uint8Array} bytes
   * @returns {Promise<boolean>}
   */
  writeWhenRoom(bytes) {
    return new Promise((resolve) => {
      this._waiting.push({ bytes, resolve });
      this._takeWaiting();
    });
  }

  /** _takeWaiting takes the waiting writes there is room for, in order. */
  _takeWaiting() {
    while (this._waiting.length > 0) {
      const w = this._waiting[0];
      const n = Math.min(w.bytes.length, this._room());
      if (n <= 0) return;
      if (n < w.bytes.length && !this.acking) return; // without acks a write is taken whole
      this._waiting[0] = { ...w, bytes: w.bytes.subarray(n) };
      this._keep(w.bytes.subarray(0, n));
      if (n === w.bytes.length) {
        this._waiting.shift();
        w.resolve(true);
      }
      if (this._timer === undefined) this._flush();
    }
  }

  /**
   * acked handles an input-ack: the gateway has the input below received
   * (it may be freed), and it refused frames up to end when end is beyond
   * received: those are resent from received after a pause.
   * @param {number} received input_offset
   * @param {number} end input_end
   */
  acked(received, end) {
    this._release(received);
    if (end > received) this.refused('input_full', received);
    this._takeWaiting();
  }

  /**
   * _release frees the kept bytes below received.
   * @param {number} received
   */
  _release(received) {
    this._acked = Math.max(this._acked, received);
    const to = Math.min(received, this._end);
    while (this._chunks.length > 0 && this._base < to) {
      const first = this._chunks[0];
      const n = Math.min(first.length, to - this._base);
      if (n === first.length) this._chunks.shift();
      else this._chunks[0] = first.subarray(n);
      this._base += n;
    }
    if (this._next < this._base) this._next = this._base;
  }

  /**
   * reset forgets the input of an execution that ended (a new incarnation
   * of its ID): the next bytes follow received. It returns the bytes the
   * old one never acknowledged.
   * @param {number} received
   * @returns {number}
   */
  reset(received) {
    const lost = this._end - Math.max(this._base, Math.min(this._acked, this._end));
    this._chunks = [];
    this._tail = null;
    this._base = this._next = this._end = this._acked = received;
    return lost;
  }

  /**
   * write queues bytes and sends them unless a paced send is due. It
   * refuses them whole (false) when the unsent input would exceed max.
   * @param {Uint8Array} bytes
   * @returns {boolean} whether the bytes were taken
   */
  write(bytes) {
    if (this._waiting.length > 0 || bytes.length > this._room()) return false;
    this._keep(bytes);
    if (this._timer === undefined) this._flush();
    return true;
  }

  /** closeStdin asks for close-stdin once everything written was sent. */
  closeStdin() {
    if (this.stdinClosed) return;
    this.stdinClosed = true;
    this._closePending = true;
    if (this._timer === undefined) this._flush();
  }

  /**
   * resume goes online on a new channel: it sends again from received,
   * what the gateway reported having, and close-stdin again if asked for.
   * @param {number} received
   */
  resume(received) {
    this._online = true;
    this._rewindAndReport(received);
    this._closePending = this.stdinClosed;
    this._flush();
  }

  /** pause goes offline: the next resume sends from what the gateway has. */
  pause() {
    this._online = false;
    this._stopPacing();
  }

  /** stop ends the queue: nothing more is sent, nothing kept. */
  stop() {
    this.pause();
    this._chunks = [];
    for (const w of this._waiting.splice(0)) w.resolve(false);
  }

  /**
   * refused handles input the gateway refused (queue full, ahead of what
   * it has, rate limited): after a pause, send again from the largest
   * offset reported, one window per pause. The first refusal after a
   * rewind sets the pause: 200 ms after progress, doubled without.
   * @param {string} code the refusal's error code
   * @param {number} received the input offset it reports
   */
  refused(code, received) {
    if (!this._online) return;
    if (code === 'input_offset' && this.stdinClosed) this._closePending = true; // perhaps close-stdin's
    if (this._refusedAt < 0) {
      const progress = received > this._lastRound;
      this._pause = this._pause < INPUT_PAUSE_MS || progress ? INPUT_PAUSE_MS : Math.min(2 * this._pause, INPUT_PAUSE_MAX_MS);
      this._lastRound = received;
      this._recovering = true;
    }
    this._refusedAt = Math.max(this._refusedAt, received);
    this._arm(this._pause);
  }

  /**
   * _keep appends written bytes to the kept input, filling a tail buffer
   * of INPUT_FRAME_MAX bytes before starting another, and drops the oldest
   * sent bytes beyond max.
   * @param {Uint8Array} bytes
   */
  _keep(bytes) {
    for (let at = 0; at < bytes.length;) {
      const last = this._chunks.at(-1);
      if (!this._tail || !last || last.buffer !== this._tail.buffer || this._tailLen === INPUT_FRAME_MAX) {
        this._tail = new Uint8Array(INPUT_FRAME_MAX);
        this._tailLen = 0;
        this._chunks.push(this._tail.subarray(0, 0));
      }
      const n = Math.min(bytes.length - at, INPUT_FRAME_MAX - this._tailLen);
      this._tail.set(bytes.subarray(at, at + n), this._tailLen);
      this._tailLen += n;
      this._chunks[this._chunks.length - 1] = this._tail.subarray(0, this._tailLen);
      at += n;
    }
    this._end += bytes.length;
    while (!this.acking && this._end - this._base > this._max && this._chunks.length > 1 &&
      this._base + this._chunks[0].length <= this._next) {
      this._base += this._chunks[0].length;
      this._chunks.shift();
    }
  }

  /**
   * _rewind restarts sending from received, the input the gateway has
   * (never below what it reported before). It returns how many bytes the
   * gateway lacks that are no longer kept: what is kept then follows what
   * the gateway has.
   * @param {number} received
   * @returns {number} bytes lost
   */
  _rewind(received) {
    received = Math.max(received, this._acked);
    this._acked = received;
    if (received >= this._end) {
      // The gateway has all we wrote (or more, from another writer):
      // number our next bytes after what it has.
      this._chunks = [];
      this._base = this._end = this._next = received;
      return 0;
    }
    let lost = 0;
    if (received < this._base) {
      lost = this._base - received;
      this._base -= lost;
      this._end -= lost;
    }
    while (this._chunks.length > 0 && this._base + this._chunks[0].length <= received) {
      this._base += this._chunks[0].length;
      this._chunks.shift();
    }
    this._next = received;
    return lost;
  }

  /** @param {number} received */
  _rewindAndReport(received) {
    const lost = this._rewind(received);
    if (lost > 0) this._sink.lost(lost);
    this._takeWaiting();
  }

  /**
   * _window takes the next bytes to send: at most INPUT_WINDOW from next,
   * copied from the newest chunk backwards (sends are near the end).
   * @returns {{from: number, data: Uint8Array}}
   */
  _window() {
    const from = this._next;
    const to = Math.min(this._end, from + INPUT_WINDOW);
    const data = new Uint8Array(to - from);
    let end = this._end;
    for (let i = this._chunks.length - 1; i >= 0 && end > from; i--) {
      const chunk = this._chunks[i];
      const pos = end - chunk.length;
      if (pos < to) {
        const a = Math.max(from, pos);
        data.set(chunk.subarray(a - pos, Math.min(to, end) - pos), a - from);
      }
      end = pos;
    }
    this._next = to;
    return { from, data };
  }

  /**
   * _flush sends the next window of input in frames of at most
   * INPUT_FRAME_MAX and arms the next paced send. With nothing left to
   * send, a pending close-stdin goes out.
   */
  _flush() {
    this._timer = undefined;
    if (!this._online) return;
    if (this._next < this._end) {
      const { from, data } = this._window();
      for (let at = 0; at < data.length; at += INPUT_FRAME_MAX) {
        this._sink.frame(from + at, data.subarray(at, at + INPUT_FRAME_MAX));
      }
      const gap = this._recovering ? this._pause : INPUT_GAP_MS;
      if (this._next === this._end) this._recovering = false;
      this._arm(gap);
      if (!this.acking) this._takeWaiting(); // sent bytes make room

    } else if (this._closePending) {
      this._closePending = false;
      this._sink.closeStdin(this._end);
    }
  }

  /**
   * _arm schedules the next paced send after ms, replacing a due one.
   * @param {number} ms
   */
  _arm(ms) {
    clearTimeout(this._timer);
    this._timer = setTimeout(() => this._paced(), ms);
  }

  /** _paced: after refusals, rewind to what the gateway has; then send. */
  _paced() {
    this._timer = undefined;
    if (this._refusedAt >= 0) {
      const at = this._refusedAt;
      this._refusedAt = -1;
      this._rewindAndReport(at);
    } else {
      this._recovering = false; // a pause passed without a refusal
    }
    this._flush();
  }

  /** _stopPacing forgets a due send and the refusals: offline or at the end. */
  _stopPacing() {
    clearTimeout(this._timer);
    this._timer = undefined;
    this._refusedAt = this._lastRound = -1;
    this._pause = 0;
    this._recovering = false;
  }
}
