// Makes docs/get-models.png: Get models on a repo's page, each quant's fit
// label, and a download paused part-way, against the test Hub on 127.0.0.1
// (tests/hub/hub_server.py). Run under Xvfb with the app built:
//   Xvfb :98 -screen 0 1200x780x24 & DISPLAY=:98 node tests/e2e/screenshot_hub.mjs
import { execFileSync, spawn } from 'node:child_process';
import { appendFileSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { Harness } from './harness.mjs';

const root = resolve(import.meta.dirname, '../..');
const out = join(root, 'docs/get-models.png');
const modelsCache = process.env.HEARTH_MODEL_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'hearth', 'models');
const model = join(modelsCache, 'SmolLM2-135M-Instruct.Q4_1.gguf');
const work = mkdtempSync(join(tmpdir(), 'hearth-hub-shot-'));
const repo = join(work, 'repos/HuggingFaceTB/SmolLM2-135M-Instruct-GGUF');
mkdirSync(repo, { recursive: true });
for (const [i, quant] of ['Q4_1', 'Q8_0', 'F16'].entries()) {
  copyFileSync(model, join(repo, `SmolLM2-135M-Instruct-${quant}.gguf`));
  appendFileSync(join(repo, `SmolLM2-135M-Instruct-${quant}.gguf`), Buffer.alloc(i << 20));
}
writeFileSync(join(repo, 'README.md'), '# SmolLM2-135M-Instruct\n\nA compact instruction-tuned model, in GGUF for llama.cpp-compatible apps.\n\n| Quant | Use |\n|---|---|\n| Q4_1 | small and fast |\n| Q8_0 | near full quality |\n');
writeFileSync(join(repo, '.repo.json'), JSON.stringify({ downloads: 48213, likes: 312, license: 'apache-2.0', lastModified: '2026-11-02T09:00:00.000Z' }));
const hubProcess = spawn('python3', [join(root, 'tests/hub/hub_server.py'), join(work, 'repos')], { stdio: ['pipe', 'pipe', 'inherit'] });
const hub = (await new Promise((r) => createInterface({ input: hubProcess.stdout }).once('line', r))).split(' ')[1];
const h = new Harness({ env: { HF_ENDPOINT: hub, HF_HUB_CACHE: join(work, 'hf-cache'), HF_TOKEN: '' } });
await h.startDriver();
try {
  const d = await h.openApp();
  await (await d.find('[data-testid=open-models]')).click();
  await (await d.find('[data-testid=models-get]')).click();
  await (await d.find('[data-testid=hub-result]')).click();
  await d.waitFor(async () => (await d.$$('[data-testid=hub-quant-fit][data-fit=fits]')).length === 3, 'the fit labels');
  await fetch(`${hub}/_fault`, { method: 'POST', body: JSON.stringify({ kind: 'slow', rate: 3000000, times: 1000 }) });
  await (await d.find('[data-testid=hub-quant][data-quant=Q8_0] [data-testid=hub-quant-download]')).click();
  await d.waitFor(async () => /MB of/.test(await (await d.find('[data-testid=hub-download-bytes]')).text()), 'progress');
  await new Promise((r) => setTimeout(r, 6000));
  await (await d.find('[data-testid=hub-download-pause]')).click();
  await d.waitFor(async () => (await d.$$('[data-testid=hub-download][data-state=paused]')).length === 1, 'the pause');
  await new Promise((r) => setTimeout(r, 500));
  execFileSync('/usr/bin/import', ['-window', 'root', out]);
  console.log(out);
} finally {
  await h.stop();
  hubProcess.kill();
  rmSync(work, { recursive: true, force: true });
  process.exit(0);
}
