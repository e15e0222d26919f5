// A small W3C WebDriver client over fetch: enough to drive the real app
// through tauri-driver and WebKitWebDriver without a client library.
const ELEMENT = 'element-6066-11e4-a52e-4f735466cecf';

export const Keys = { NULL: '\uE000', ENTER: '\uE007', ESCAPE: '\uE00C', SHIFT: '\uE008', BACKSPACE: '\uE003', CONTROL: '\uE009' };

export class WebDriver {
  constructor(base, sessionId) {
    this.base = base;
    this.sessionId = sessionId;
  }

  static async start(base, capabilities) {
    const res = await request(base, 'POST', '/session', { capabilities: { alwaysMatch: capabilities } });
    return new WebDriver(base, res.sessionId);
  }

  cmd(method, path, body) {
    return request(this.base, method, `/session/${this.sessionId}${path}`, body);
  }

  async quit() {
    try {
      await this.cmd('DELETE', '');
    } catch {
      // The app may already be gone (the crash test kills it).
    }
  }

  async $$(css) {
    const found = await this.cmd('POST', '/elements', { using: 'css selector', value: css });
    return found.map((e) => new Element(this, e[ELEMENT]));
  }

  async $(css) {
    const all = await this.$$(css);
    return all[0] ?? null;
  }

  /** Waits for `css` to match, then returns the first match. */
  async find(css, timeoutMs = 20000) {
    return this.waitFor(() => this.$(css), `${css} to appear`, timeoutMs);
  }

  execute(script, args = []) {
    return this.cmd('POST', '/execute/sync', { script, args });
  }

  /** Runs `script`, which calls its last argument when done, and returns what it passed. */
  executeAsync(script, args = []) {
    return this.cmd('POST', '/execute/async', { script, args });
  }

  async waitFor(probe, what, timeoutMs = 20000, everyMs = 100) {
    const deadline = Date.now() + timeoutMs;
    let last;
    for (;;) {
      try {
        last = await probe();
        if (last) return last;
      } catch (e) {
        last = e;
      }
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${last})`);
      await new Promise((r) => setTimeout(r, everyMs));
    }
  }
}

export class Element {
  constructor(driver, id) {
    this.driver = driver;
    this.id = id;
  }
  cmd(method, path, body) {
    return this.driver.cmd(method, `/element/${this.id}${path}`, body);
  }
  click() {
    return this.cmd('POST', '/click', {});
  }
  type(text) {
    return this.cmd('POST', '/value', { text });
  }
  clear() {
    return this.cmd('POST', '/clear', {});
  }
  text() {
    return this.cmd('GET', '/text');
  }
  attr(name) {
    return this.cmd('GET', `/attribute/${name}`);
  }
  prop(name) {
    return this.cmd('GET', `/property/${name}`);
  }
  async $$(css) {
    const found = await this.cmd('POST', '/elements', { using: 'css selector', value: css });
    return found.map((e) => new Element(this.driver, e[ELEMENT]));
  }
  async $(css) {
    return (await this.$$(css))[0] ?? null;
  }
}

async function request(base, method, path, body) {
  const res = await fetch(base + path, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await res.json().catch(() => ({}));
  if (!res.ok) {
    const v = json.value ?? {};
    throw new Error(`${method} ${path}: ${v.error ?? res.status} ${v.message ?? ''}`);
  }
  return json.value;
}
