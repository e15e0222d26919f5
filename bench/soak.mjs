// Soak: many turns across many conversations in the real app, with restarts
// in between, reporting the app's memory (RSS of the app and its webview
// processes) and its open file handles over time. Not a CI test: it runs
// for tens of minutes. Memory should stay flat within the cache budget.
//
//   cargo build --release -p hearth
//   Xvfb :95 -screen 0 1280x800x24 -nolisten tcp &
//   DISPLAY=:95 node bench/soak.mjs                 # 1,000 turns, 50 conversations
//   DISPLAY=:95 TURNS=300 CONVERSATIONS=20 RESTART_EVERY=100 node bench/soak.mjs
//
// Prints one JSON line per sample and a summary at the end.
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { join, resolve } from 'node:path';

const root = resolve(import.meta.dirname, '..');
const targetDir = process.env.CARGO_TARGET_DIR ?? join(root, 'target');
process.env.HEARTH_APP ??= join(targetDir, 'release', 'hearth');
const { Harness, newChat, openChat, setSetting, send, waitForReply, appBinary } = await import('../tests/e2e/harness.mjs');

const TURNS = Number(process.env.TURNS ?? 1000);
const CONVERSATIONS = Number(process.env.CONVERSATIONS ?? 50);
const RESTART_EVERY = Number(process.env.RESTART_EVERY ?? 200);
const SAMPLE_EVERY = Number(process.env.SAMPLE_EVERY ?? 25);
const MEMORY_BUDGET_MB = Number(process.env.MEMORY_BUDGET_MB ?? 256);

function pids() {
  return readdirSync('/proc').filter((p) => /^\d+$/.test(p));
}

function stat(pid) {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return { ppid: Number(s.slice(s.lastIndexOf(')') + 2).split(' ')[1]) };
  } catch {
    return null;
  }
}

function rssMb(pid) {
  try {
    const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

/** The app's process (by its executable) and its children (the webview's). */
function sample() {
  const app = pids().find((p) => {
    try {
      return readlinkSync(`/proc/${p}/exe`) === appBinary;
    } catch {
      return false;
    }
  });
  if (!app) return null;
  const children = pids().filter((p) => stat(p)?.ppid === Number(app));
  let fds = 0;
  try {
    fds = readdirSync(`/proc/${app}/fd`).length;
  } catch {
    // gone meanwhile
  }
  return {
    app_rss_mb: Math.round(rssMb(app)),
    webview_rss_mb: Math.round(children.reduce((n, p) => n + rssMb(p), 0)),
    app_fds: fds,
  };
}

const h = new Harness();
const samples = [];
const started = Date.now();
try {
  await h.startDriver();
  let d = await h.openApp();
  await d.execute(`return window.__TAURI_INTERNALS__.invoke('caches_budgets_set', { budgets: { memoryMb: ${MEMORY_BUDGET_MB}, diskMb: 2048 } })`);
  const ids = [];
  for (let turn = 0; turn < TURNS; turn++) {
    if (turn > 0 && turn % RESTART_EVERY === 0) {
      await h.closeApp();
      d = await h.openApp();
    }
    const slot = turn % CONVERSATIONS;
    if (ids.length <= slot) {
      ids.push(await newChat(d));
      await setSetting(d, 'maxNewTokens', 12);
      await setSetting(d, 'temperature', 0.8);
    } else {
      await openChat(d, ids[slot]);
    }
    await send(d, `Turn ${turn}: tell me one short fact about the number ${turn}.`);
    await waitForReply(d, 300000);
    if (turn % SAMPLE_EVERY === SAMPLE_EVERY - 1) {
      const s = { turn: turn + 1, minutes: +((Date.now() - started) / 60000).toFixed(1), ...sample() };
      samples.push(s);
      console.log(JSON.stringify(s));
    }
  }
} finally {
  await h.stop();
}

const after = (from) => samples.filter((s) => s.turn > from);
const range = (xs, k) => [Math.min(...xs.map((s) => s[k])), Math.max(...xs.map((s) => s[k]))];
// After the first restart every conversation exists and caches have filled their budget.
const steady = after(Math.min(RESTART_EVERY, TURNS / 2));
console.log(
  JSON.stringify({
    turns: TURNS,
    conversations: CONVERSATIONS,
    restart_every: RESTART_EVERY,
    memory_budget_mb: MEMORY_BUDGET_MB,
    minutes: +((Date.now() - started) / 60000).toFixed(1),
    steady_app_rss_mb: range(steady, 'app_rss_mb'),
    steady_webview_rss_mb: range(steady, 'webview_rss_mb'),
    steady_app_fds: range(steady, 'app_fds'),
  }),
);
