// Starts tauri-driver and the real Hearth binary under it, with its own data
// folder, and gives the tests a WebDriver session on the app window.
import { spawn } from 'node:child_process';
import { mkdtempSync, existsSync, rmSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { WebDriver, Keys } from './webdriver.mjs';

const root = resolve(import.meta.dirname, '../..');
const targetDir = process.env.CARGO_TARGET_DIR ?? join(root, 'target');
export const appBinary = process.env.HEARTH_APP ?? join(targetDir, 'debug', 'hearth');
export class Harness {
  /** `env` is added to the app's environment; each harness needs its own `port`. */
  constructor({ env = {}, port = Number(process.env.TAURI_DRIVER_PORT ?? 4444) } = {}) {
    this.dataDir = mkdtempSync(join(tmpdir(), 'hearth-e2e-'));
    this.env = env;
    this.base = `http://127.0.0.1:${port}`;
    this.port = port;
    this.driverProcess = null;
    this.driver = null;
  }

  async startDriver() {
    if (!existsSync(appBinary)) throw new Error(`build the app first: ${appBinary} is missing`);
    if (!process.env.DISPLAY) throw new Error('DISPLAY is not set: run under Xvfb (tests/e2e/run.sh does)');
    const driverBin = process.env.TAURI_DRIVER ?? 'tauri-driver';
    // tauri-driver also needs a port for WebKitWebDriver: take the next one.
    this.driverProcess = spawn(driverBin, ['--port', String(this.port), '--native-port', String(this.port + 1)], {
      env: { ...process.env, HEARTH_DATA_DIR: this.dataDir, ...this.env },
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    const deadline = Date.now() + 15000;
    for (;;) {
      try {
        const res = await fetch(`${this.base}/status`);
        if (res.ok) break;
      } catch {
        // not up yet
      }
      if (Date.now() > deadline) throw new Error('tauri-driver did not start');
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Opens the app (again, after a restart) and waits until the model is ready. */
  async openApp({ waitForModel = true } = {}) {
    this.driver = await WebDriver.start(this.base, { 'tauri:options': { application: appBinary } });
    if (!waitForModel) return this.driver;
    await this.driver.waitFor(
      async () => (await (await this.driver.find('[data-testid=model-status]')).attr('data-state')) === 'ready',
      'the model to load',
      120000,
    );
    return this.driver;
  }

  async closeApp() {
    await this.driver?.quit();
    this.driver = null;
  }

  /** SIGKILLs the app process: no shutdown code runs. Only the app this
   *  harness's driver started, found by PID: a pattern over command lines
   *  would also match `hearth-cli` and other harnesses' apps. */
  killApp() {
    const pids = this.appPids();
    if (pids.length === 0) throw new Error(`no ${appBinary} runs under this harness's tauri-driver`);
    for (const pid of pids) process.kill(pid, 'SIGKILL');
  }

  /** The processes running the app binary below this harness's tauri-driver. */
  appPids() {
    const root = this.driverProcess?.pid;
    if (!root) return [];
    const parent = new Map();
    for (const name of readdirSync('/proc')) {
      if (!/^\d+$/.test(name)) continue;
      try {
        const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
        // The fields after the command's closing parenthesis: state, then the parent's PID.
        parent.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
      } catch {
        // gone since the listing
      }
    }
    const below = (pid) => {
      for (let p = parent.get(pid); p !== undefined && p > 1; p = parent.get(p)) if (p === root) return true;
      return false;
    };
    const exe = (pid) => {
      try {
        return readlinkSync(`/proc/${pid}/exe`).replace(/ \(deleted\)$/, '');
      } catch {
        return '';
      }
    };
    const binary = resolve(appBinary);
    return [...parent.keys()].filter((pid) => below(pid) && exe(pid) === binary);
  }

  async stop() {
    await this.closeApp();
    const p = this.driverProcess;
    if (p && p.exitCode === null && p.signalCode === null) {
      // SIGTERM, not SIGKILL: tauri-driver then stops WebKitWebDriver too.
      const exited = new Promise((r) => p.once('exit', r));
      p.kill('SIGTERM');
      const timer = new Promise((r) => setTimeout(r, 5000, 'timeout'));
      if ((await Promise.race([exited, timer])) === 'timeout') p.kill('SIGKILL');
    }
    // Each run leaves a database and caches of tens of MB; CI machines reuse /tmp.
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

// Small helpers over the app's test ids.
export async function activeConversationId(d) {
  const el = await d.find('[data-testid=conversation].active');
  return Number(await el.attr('data-id'));
}

export async function newChat(d) {
  const before = await d.$$('[data-testid=conversation]');
  await (await d.find('[data-testid=new-chat]')).click();
  await d.waitFor(async () => (await d.$$('[data-testid=conversation]')).length === before.length + 1, 'a new chat');
  return activeConversationId(d);
}

export async function openChat(d, id) {
  await (await d.find(`[data-testid=conversation][data-id="${id}"] button.open`)).click();
  await d.waitFor(async () => (await activeConversationId(d)) === id, `chat ${id} to open`);
  // Until its thread arrives, the page still shows the chat before.
  await d.find(`[data-testid=messages][data-conversation="${id}"]`);
}

export async function send(d, text) {
  const box = await d.find('[data-testid=composer]');
  await box.type(text);
  await box.type(Keys.ENTER);
}

export async function messages(d) {
  return d.$$('[data-testid=message]');
}

export async function lastReply(d) {
  const replies = await d.$$('[data-testid=message][data-role=assistant]');
  return replies[replies.length - 1] ?? null;
}

/** Waits for the open chat's last reply to finish, and returns its stats element. */
export async function waitForReply(d, timeoutMs = 120000) {
  return d.waitFor(
    async () => {
      const r = await lastReply(d);
      if (!r || (await r.attr('data-status')) === 'streaming') return null;
      return r.$('[data-testid=reply-stats]');
    },
    'the reply to finish',
    timeoutMs,
  );
}

/** Types `value` into the open chat's setting `key` and waits until the
 *  conversation's saved settings hold it, or the field shows why it cannot:
 *  a reply sent earlier would still run with the old value (on a loaded
 *  machine saving can take a while). */
export async function setSetting(d, key, value) {
  const input = await d.find(`[data-testid=setting-${key}]`);
  await input.clear();
  if (value !== '') await input.type(String(value));
  const want = value === '' ? null : Number(value);
  await d.waitFor(async () => {
    // Read each time: just after a new chat, the list may still mark the one before.
    const id = await activeConversationId(d);
    const out = JSON.parse(await d.executeAsync(
      'const [id, cb] = arguments; window.__TAURI_INTERNALS__.invoke("settings_get", { conversationId: id }).then((r) => cb(JSON.stringify(r)), (e) => cb(JSON.stringify({ error: e })));',
      [id],
    ));
    const saved = out[key] ?? null;
    // f32 values come back as the nearest f64 to them (0.9 as 0.8999999761…).
    if (want === null ? saved === null : Math.abs(Number(saved) - want) <= 1e-6 * Math.max(1, Math.abs(want))) return true;
    return (await d.$(`[data-testid=error-${key}]`)) !== null;
  }, `setting ${key} = ${value} to be saved`, 60000);
}

export { Keys };
