// Get models, in the real app: a new user with no model searches a
// Hub-compatible server on 127.0.0.1 (tests/hub/hub_server.py, with a second
// host as its CDN), opens a repo, sees a quant's fit label, downloads it with
// progress, pauses, resumes, and chats with it. A cancelled download leaves
// no partial file; a gated repo without a token says so. Also: models in
// another app's folder are found and added in place.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { appendFileSync, copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { homedir, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Harness, Keys, send, waitForReply } from './harness.mjs';

const root = resolve(import.meta.dirname, '../..');
const modelsCache = process.env.HEARTH_MODEL_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'hearth', 'models');
const defaultModel = join(modelsCache, 'SmolLM2-135M-Instruct.Q4_1.gguf');
const work = mkdtempSync(join(tmpdir(), 'hearth-hub-e2e-'));
const repos = join(work, 'repos');
const hfCache = join(work, 'hf-cache');
const home = join(work, 'home');
const emptyModels = join(work, 'models');
let hubProcess;
let hub;
let h;

async function fault(body) {
  await fetch(`${hub}/_fault`, { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
}

/** Every file under `dir`. */
function files(dir) {
  let out = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    out = e.isDirectory() ? out.concat(files(p)) : out.concat([p]);
  }
  return out;
}

describe('get models from the Hub', () => {
  before(async () => {
    for (const d of [repos, hfCache, home, emptyModels]) mkdirSync(d, { recursive: true });
    const smol = join(repos, 'test-org/SmolLM2-135M-Instruct-GGUF');
    mkdirSync(smol, { recursive: true });
    copyFileSync(defaultModel, join(smol, 'SmolLM2-135M-Instruct-Q4_1.gguf'));
    // Other bytes (a tail no tensor reads), so not the same blob as Q4_1.
    copyFileSync(defaultModel, join(smol, 'SmolLM2-135M-Instruct-Q8_0.gguf'));
    appendFileSync(join(smol, 'SmolLM2-135M-Instruct-Q8_0.gguf'), Buffer.alloc(1 << 20));
    // What a hostile README tries: a script, an image's error handler, a
    // javascript: link. innerHTML never runs a <script>, so the other two
    // are what would get through a renderer that did not sanitise.
    writeFileSync(
      join(smol, 'README.md'),
      '# SmolLM2 135M\n\nA small model. <script>window.__hacked = 1</script>\n\n' +
        '<img src="data:," onerror="window.__hacked = 2">\n\n' +
        '[docs](javascript:window.__hacked=3)\n',
    );
    writeFileSync(join(smol, '.repo.json'), JSON.stringify({ downloads: 1000, likes: 40, license: 'apache-2.0' }));
    const gated = join(repos, 'test-org/Gated-GGUF');
    mkdirSync(gated, { recursive: true });
    copyFileSync(defaultModel, join(gated, 'Gated-Q4_1.gguf'));
    writeFileSync(join(gated, '.repo.json'), JSON.stringify({ downloads: 10, gated: 'manual' }));
    // Another app's folder: an Ollama model, manifest and blob.
    const digest = 'sha256:' + 'ab'.repeat(32);
    mkdirSync(join(home, '.ollama/models/blobs'), { recursive: true });
    copyFileSync(defaultModel, join(home, '.ollama/models/blobs', digest.replace(':', '-')));
    const manifest = join(home, '.ollama/models/manifests/registry.ollama.ai/library/smollm2/135m');
    mkdirSync(resolve(manifest, '..'), { recursive: true });
    writeFileSync(manifest, JSON.stringify({ layers: [{ mediaType: 'application/vnd.ollama.image.model', digest, size: 1 }] }));

    hubProcess = spawn('python3', [join(root, 'tests/hub/hub_server.py'), repos, '--token', 'hf_e2e'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const line = await new Promise((r) => createInterface({ input: hubProcess.stdout }).once('line', r));
    hub = line.split(' ')[1];
    h = new Harness({
      port: 4584,
      env: { HEARTH_MODEL_DIR: emptyModels, HF_ENDPOINT: hub, HF_HUB_CACHE: hfCache, HOME: home, HF_TOKEN: '' },
    });
    await h.startDriver();
  });

  after(async () => {
    await h?.stop();
    hubProcess?.kill();
    rmSync(work, { recursive: true, force: true });
  });

  it('searches, shows the fit, downloads with pause and resume, and chats', async () => {
    const d = await h.openApp({ waitForModel: false });
    await (await d.find('[data-testid=first-run-get]')).click();
    await (await d.find('[data-testid=hub-search-input]')).type('SmolLM2');
    await (await d.find('[data-testid=hub-search-button]')).click();
    await d.waitFor(async () => (await d.$$('[data-testid=hub-result]')).length === 1, 'one search result');
    await (await d.find('[data-testid=hub-result]')).click();
    const q4 = '[data-testid=hub-quant][data-quant=Q4_1]';
    await d.find(q4);
    await d.waitFor(async () => (await (await d.find(`${q4} [data-testid=hub-quant-fit]`)).attr('data-fit')) === 'fits', 'the fit label');
    // The README is shown sanitised: nothing in it runs.
    assert.match(await (await d.find('[data-testid=hub-readme]')).text(), /A small model/);
    assert.equal(
      await d.execute(
        "return [...document.querySelectorAll('[data-testid=hub-readme] [onerror], [data-testid=hub-readme] a[href^=javascript]')].length",
      ),
      0,
    );
    const docs = await d.execute("return [...document.querySelectorAll('[data-testid=hub-readme] a')].find((a) => a.textContent === 'docs') ?? null");
    if (docs) await d.execute("[...document.querySelectorAll('[data-testid=hub-readme] a')].find((a) => a.textContent === 'docs').click()");
    assert.equal(await d.execute('return window.__hacked ?? null'), null);

    // 1 MB/s a connection (four 32 MiB chunks): ~25 s, so Pause always finds it running.
    await fault({ kind: 'slow', rate: 1000000, times: 1000 });
    await (await d.find(`${q4} [data-testid=hub-quant-download]`)).click();
    const row = '[data-testid=hub-download]';
    await d.waitFor(async () => (await (await d.find(row)).attr('data-state')) === 'running', 'the download to start');
    await d.waitFor(async () => /MB of/.test(await (await d.find('[data-testid=hub-download-bytes]')).text()), 'progress');
    await (await d.find('[data-testid=hub-download-pause]')).click();
    await d.waitFor(async () => (await (await d.find(row)).attr('data-state')) === 'paused', 'the pause');
    assert.ok(files(hfCache).some((f) => f.endsWith('.hearth-part')), 'the pause keeps what arrived');
    await fetch(`${hub}/_log/clear`, { method: 'POST', body: '{}' });
    await (await d.find('[data-testid=hub-download-resume]')).click();
    await d.waitFor(
      async () => (await (await d.find('[data-testid=model-status]')).attr('data-state')) === 'ready',
      'the downloaded model to open',
      120000,
    );
    const snapshot = files(hfCache).find((f) => f.endsWith('SmolLM2-135M-Instruct-Q4_1.gguf'));
    assert.ok(snapshot?.includes('/snapshots/'), 'stored in the Hugging Face layout');
    // A new chat on it, and a reply.
    await d.waitFor(async () => (await d.$$('[data-testid=composer]')).length === 1, 'a new chat');
    await send(d, 'Hello!');
    await waitForReply(d);
  });

  it('cancel leaves no partial file, and a gated repo asks for a token', async () => {
    const d = h.driver;
    await (await d.find('[data-testid=open-models]')).click();
    await (await d.find('[data-testid=models-get]')).click();
    await (await d.find('[data-testid=hub-search-input]')).type(Keys.BACKSPACE.repeat(12));
    await (await d.find('[data-testid=hub-search-button]')).click();
    await d.waitFor(async () => (await d.$$('[data-testid=hub-result]')).length >= 2, 'the results');
    await (await d.find('[data-testid=hub-result][data-id="test-org/SmolLM2-135M-Instruct-GGUF"]')).click();
    await fault({ kind: 'slow', rate: 2000000, times: 1000 });
    await (await d.find('[data-testid=hub-quant][data-quant=Q8_0] [data-testid=hub-quant-download]')).click();
    const running = '[data-testid=hub-download][data-state=running]';
    await d.waitFor(async () => (await d.$$(running)).length === 1, 'the second download to start');
    await (await d.find(`${running} [data-testid=hub-download-cancel]`)).click();
    await d.waitFor(async () => (await d.$$(running)).length === 0, 'the cancel');
    await d.waitFor(async () => !files(hfCache).some((f) => f.endsWith('.hearth-part') || f.endsWith('.json')), 'no partial file');
    await fetch(`${hub}/_log/clear`, { method: 'POST', body: '{}' });

    await (await d.find('[data-testid=hub-back]')).click();
    await (await d.find('[data-testid=hub-result][data-id="test-org/Gated-GGUF"]')).click();
    await (await d.find('[data-testid=hub-quant][data-quant=Q4_1] [data-testid=hub-quant-download]')).click();
    await d.waitFor(async () => (await d.$$('[data-testid=hub-download-error]')).length === 1, 'the gated error');
    assert.match(await (await d.find('[data-testid=hub-download-error]')).text(), /gated.*token/);
    await d.find('[data-testid=hub-token-input]');
  });

  it('finds the models another app keeps and adds them in place', async () => {
    const d = h.driver;
    await (await d.find('[data-testid=hub-close]')).click();
    await (await d.find('[data-testid=models-find]')).click();
    const ollama = '[data-testid=found-model][data-name="smollm2:135m"]';
    await d.find(ollama);
    await (await d.find('[data-testid=found-add]')).click();
    await d.waitFor(async () => /in the library/.test(await (await d.find(ollama)).text()), 'the model added');
    await (await d.find('[data-testid=found-close]')).click();
    // The library, read again, lists it under its name with its app (the badge is upper-case).
    await d.waitFor(async () => {
      for (const r of await d.$$('[data-testid=model-row]')) {
        const text = await r.text();
        if (/smollm2:135m/.test(text) && /ollama/i.test(text)) return true;
      }
      return false;
    }, 'the Ollama model in the library under its name and app');
  });
});
