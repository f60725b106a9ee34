// emitter.js: the event emitter the client and its executions share.

/** Emitter is a minimal event emitter: on() returns a function that unsubscribes. */
export class Emitter {
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
