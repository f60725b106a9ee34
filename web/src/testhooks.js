// testhooks.js: what the browser tests (cmd/termgate/browser_test.go) read
// from the page. Only a browser driven by automation gets them: the one the
// tests start says so in navigator.webdriver, which the WebDriver spec
// defines and Chromium sets when a program controls it. A person's tab
// thus keeps no copy of its output besides the terminal's own.

/** TESTING is whether this page runs under automation: the test hooks are on. */
export const TESTING = typeof navigator !== 'undefined' && navigator.webdriver === true;

/** Bytes of output a tab's transcript keeps: the newest. */
const TRANSCRIPT_MAX = 4 << 20;

/**
 * Transcript keeps a bounded copy of a tab's output for the test hooks:
 * bytes as they arrived, which the terminal's screen no longer has once
 * they scroll away or are overwritten.
 */
export class Transcript {
  /** @param {number} [max] bytes kept: the newest */
  constructor(max = TRANSCRIPT_MAX) {
    this.max = max;
    /** @type {Uint8Array[]} */
    this.chunks = [];
    this.size = 0;
  }

  /** @param {Uint8Array} bytes */
  add(bytes) {
    this.chunks.push(bytes);
    this.size += bytes.length;
    while (this.size > this.max && this.chunks.length > 1) {
      this.size -= this.chunks[0].length;
      this.chunks.shift();
    }
    if (this.size > this.max) {
      const only = this.chunks[0];
      this.chunks[0] = only.subarray(only.length - this.max);
      this.size = this.max;
    }
  }

  text() {
    const all = new Uint8Array(this.size);
    let at = 0;
    for (const c of this.chunks) {
      all.set(c, at);
      at += c.length;
    }
    return new TextDecoder().decode(all); // one decode of the whole stream
  }
}

/**
 * @typedef {object} TestHooks what window.__termgate offers: functions
 *   that read the page's state and grant nothing.
 * @property {() => string} transcript the active tab's output so far
 * @property {() => string | undefined} status the status line's data-state
 * @property {() => number} connections WebSockets the client has opened
 * @property {() => string | null} execution the active tab's execution ID
 * @property {() => boolean} replaying whether the active tab is replaying history
 * @property {() => {id: string | null, label: string, exited: boolean}[]} tabs the
 *   tabs in order: execution ID, the label shown, whether it ended
 * @property {(prefix: string) => [string, number][]} cells the newest line of
 *   the active terminal's buffer that starts with prefix: characters and
 *   width of each cell
 * @property {() => string} selection the active terminal's selected text
 * @property {() => {lines: string[], cursor: [number, number], buffer: string, size: [number, number]} | null} screen
 *   what the active terminal shows: its visible lines, cursor, active buffer and size (rows, columns)
 */

/**
 * installTestHooks makes hooks window.__termgate, frozen and read-only.
 * @param {TestHooks} hooks
 */
export function installTestHooks(hooks) {
  Object.defineProperty(window, '__termgate', { value: Object.freeze({ ...hooks }) });
}
