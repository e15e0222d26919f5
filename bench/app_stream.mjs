// The app's streaming speed against the engine's, on one machine in one run:
// the real app under Xvfb (through tauri-driver) and `hearth-cli generate`,
// same model, prompt, greedy settings and thread count.
//
// app tok/s: tokens shown per second, from the first token's text reaching
// the page to the last one's (a MutationObserver in the page timestamps them).
// app first token: from the Enter key to the first token's text in the page.
// Both against the CLI's decode tok/s and prefill time for the same prompt.
//
//   cargo build --release -p hearth -p hearth-cli
//   tests/e2e/run-one.sh bench/app_stream.mjs        (or under any Xvfb DISPLAY)
//   HEARTH_APP=target/debug/hearth ... for another build
import { execFileSync } from 'node:child_process';
import { join, resolve } from 'node:path';

const root = resolve(import.meta.dirname, '..');
const targetDir = process.env.CARGO_TARGET_DIR ?? join(root, 'target');
process.env.HEARTH_APP ??= join(targetDir, 'release', 'hearth');
const { Harness, newChat, setSetting, send, waitForReply } = await import('../tests/e2e/harness.mjs');

const PROMPT = process.env.PROMPT ?? 'Explain in detail how a computer works, step by step.';
const TOKENS = Number(process.env.TOKENS ?? 300);
const REPEATS = Number(process.env.REPEATS ?? 3);
const cli = process.env.HEARTH_CLI ?? join(targetDir, 'release', 'hearth-cli');

function cliRun() {
  const out = execFileSync(cli, ['generate', '--prompt', PROMPT, '--temperature', '0', '--max-tokens', String(TOKENS), '--json'], {
    encoding: 'utf8',
  });
  const j = JSON.parse(out);
  return { tokS: j.decode_tokens_per_s, firstMs: j.prefill_ms, tokens: j.generated_token_ids.length, finish: j.finish_reason };
}

const OBSERVE = `
  const b = (window.__bench = { sent: 0, first: 0, last: 0, len: 0, renders: 0 });
  document.addEventListener('keydown', (e) => { if (e.key === 'Enter' && !b.sent) b.sent = performance.now(); }, true);
  new MutationObserver(() => {
    const replies = document.querySelectorAll('[data-testid=message][data-role=assistant]');
    const r = replies[replies.length - 1];
    if (!r || r.dataset.status !== 'streaming') return;
    const len = r.querySelector('[data-testid=message-body]').textContent.length;
    if (len === b.len) return;
    const now = performance.now();
    if (!b.first && len > 0) b.first = now;
    b.len = len; b.last = now; b.renders++;
  }).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
`;

async function appRun(d) {
  await newChat(d);
  await setSetting(d, 'temperature', 0);
  await setSetting(d, 'maxNewTokens', TOKENS);
  await d.execute(OBSERVE);
  await send(d, PROMPT);
  // Wait in the page, not by polling over WebDriver: polling costs CPU
  // that the app's model threads would otherwise get.
  await d.executeAsync(`
    const done = arguments[arguments.length - 1];
    const check = () => {
      const replies = document.querySelectorAll('[data-testid=message][data-role=assistant]');
      const r = replies[replies.length - 1];
      if (r && r.dataset.status !== 'streaming' && r.querySelector('[data-testid=reply-stats]')) done(true);
      else setTimeout(check, 500);
    };
    check();
  `);
  const stats = await waitForReply(d, 300000);
  const b = await d.execute('return window.__bench');
  const tokens = Number(await stats.attr('data-generated-tokens'));
  return {
    tokS: (tokens - 1) / ((b.last - b.first) / 1000),
    firstMs: b.first - b.sent,
    engineTokS: Number(await stats.attr('data-tokens-per-s')),
    engineFirstMs: Number(await stats.attr('data-ttft-ms')),
    tokens,
    finish: await stats.attr('data-finish'),
    renders: b.renders,
  };
}

const best = (runs, key, pick) => runs.map((r) => r[key]).reduce((a, b) => pick(a, b));
const h = new Harness();
try {
  await h.startDriver();
  const d = await h.openApp();
  await d.cmd('POST', '/timeouts', { script: 300000 });
  await appRun(d); // warm-up: the first reply after loading also faults the weights in
  const app = [];
  const engine = [];
  for (let i = 0; i < REPEATS; i++) {
    engine.push(cliRun());
    app.push(await appRun(d));
  }
  const result = {
    date: new Date().toISOString(),
    app_binary: process.env.HEARTH_APP,
    prompt: PROMPT,
    tokens: app[0].tokens,
    finish: app[0].finish,
    cli_tokens: engine[0].tokens,
    app_tok_s: best(app, 'tokS', Math.max),
    app_engine_tok_s: best(app, 'engineTokS', Math.max),
    cli_tok_s: best(engine, 'tokS', Math.max),
    app_first_ms: best(app, 'firstMs', Math.min),
    app_engine_first_ms: best(app, 'engineFirstMs', Math.min),
    cli_prefill_ms: best(engine, 'firstMs', Math.min),
    renders: app.map((r) => r.renders),
  };
  result.tok_s_ratio = result.app_tok_s / result.cli_tok_s;
  result.first_token_ratio = result.app_first_ms / result.cli_prefill_ms;
  console.log(JSON.stringify(result, null, 2));
} finally {
  await h.stop();
}
