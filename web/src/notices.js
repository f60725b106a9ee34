// notices.js: the lines the page writes into a terminal for what the
// gateway says about an execution (an 'event' with event "notice": a
// warning such as "this execution will be stopped soon"). The text comes
// from the gateway, so it is made plain: no escape sequence in it reaches
// the terminal.

/** Longest notice text written. */
const NOTICE_MAX = 500;

/**
 * @typedef {object} NoticeEvent an 'event' message with event "notice"
 * @property {string} [reason] a stable code (idle_timeout, timeout, ...)
 * @property {string} [message] safe to show
 * @property {string | number} [at] when it takes effect (RFC 3339, or ms since the epoch)
 */

/**
 * connectionText is the status line while no socket is up: why (the
 * server restarted, or the connection was lost) and, while waiting,
 * the seconds to the next attempt.
 * @param {{state: string, restart?: boolean, lost?: boolean}} s
 * @param {number} [secs] seconds to the next attempt, while reconnecting
 * @returns {string}
 */
export function connectionText(s, secs) {
  const when = s.state === 'reconnecting' && secs !== undefined ? ` in ${secs} s` : '';
  if (s.restart) return `the server restarted; reconnecting${when}`;
  if (s.lost || s.state === 'reconnecting') return `connection lost; reconnecting${when}`;
  return s.state;
}

/** ENDED_WHY explains the error codes that end a tab's execution. */
const ENDED_WHY = /** @type {Record<string, string>} */ ({
  gone: 'the server restarted without this execution',
});

/**
 * endedText is the status line of a tab whose execution ended with an
 * error code, not an exit: "ended: gone (the server restarted without
 * this execution)".
 * @param {string} code
 * @returns {string}
 */
export function endedText(code) {
  const why = ENDED_WHY[code];
  return why ? `ended: ${code} (${why})` : `ended: ${code}`;
}

/**
 * plain removes control characters (C0, DEL, C1: ESC, CSI, OSC...) so
 * the text cannot drive the terminal, and cuts it to max characters.
 * @param {unknown} s
 * @param {number} [max]
 * @returns {string}
 */
export function plain(s, max = NOTICE_MAX) {
  // eslint-disable-next-line no-control-regex
  const t = String(s ?? '').replace(/[\u0000-\u001f\u007f-\u009f]/g, ' ').trim();
  return t.length > max ? t.slice(0, max - 1) + '\u2026' : t;
}

/**
 * noticeText says a notice in one line: its message (or its reason),
 * and when it takes effect, in the viewer's time.
 * @param {NoticeEvent} m
 * @returns {string}
 */
export function noticeText(m) {
  let text = plain(m.message) || plain(m.reason).replace(/_/g, ' ') || 'notice from the gateway';
  const at = typeof m.at === 'number' ? new Date(m.at) : new Date(String(m.at ?? ''));
  if (m.at !== undefined && m.at !== '' && !Number.isNaN(at.getTime())) text += ` (at ${at.toLocaleTimeString()})`;
  return text;
}

/**
 * noticeLine is the notice as written into the terminal: on a line of
 * its own, yellow, like the gap notice.
 * @param {NoticeEvent} m
 * @returns {string}
 */
export function noticeLine(m) {
  return `\r\n\x1b[33m[termgate: ${noticeText(m)}]\x1b[0m\r\n`;
}
