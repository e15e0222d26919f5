// The installed package, end to end: the binary the .deb put on the PATH
// (HEARTH_APP, set by tests/package/run.sh), under Xvfb through tauri-driver.
// The window shows, the default model loads and one reply arrives; a .gguf
// opened the way a file manager opens it (GIO, through the installed desktop
// entry) loads in the running Hearth; and `hearth model.gguf` on a fresh
// start loads that file instead of the default model.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, symlinkSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Harness, appBinary, lastReply, newChat, send, setSetting, waitForReply } from '../e2e/harness.mjs';
import { WebDriver } from '../e2e/webdriver.mjs';

assert.ok(process.env.HEARTH_APP, 'HEARTH_APP names the installed binary (tests/package/run.sh sets it)');
const modelsDir = process.env.HEARTH_MODEL_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'hearth', 'models');
const defaultModel = join(modelsDir, 'SmolLM2-135M-Instruct.Q4_1.gguf');
// The default model under a name of its own, so the model bar shows which file was opened.
const other = join(mkdtempSync(join(tmpdir(), 'hearth-package-')), 'Association-Check.GGUF');
symlinkSync(defaultModel, other);
const otherName = basename(other, '.GGUF');

const readyModel = async (d) => {
  const bar = await d.find('[data-testid=model-status]');
  if ((await bar.attr('data-state')) !== 'ready') return null;
  return (await bar.$('strong'))?.text();
};

describe('the installed package', () => {
  const h = new Harness({ port: 4520 });
  let d;
  before(async () => {
    await h.startDriver();
  });
  after(async () => {
    await h.stop();
  });

  it('shows its window, loads the default model and replies', async () => {
    d = await h.openApp();
    assert.equal(await d.cmd('GET', '/title'), 'Hearth');
    const rect = await d.cmd('GET', '/window/rect');
    assert.ok(rect.width >= 720 && rect.height >= 480, `the window has a size: ${JSON.stringify(rect)}`);
    assert.equal(await readyModel(d), 'SmolLM2-135M-Instruct.Q4_1');
    await newChat(d);
    await setSetting(d, 'maxNewTokens', 48);
    await send(d, 'What is 2 + 2?');
    const stats = await waitForReply(d);
    assert.match(await stats.attr('data-finish'), /^(end_token|max_tokens)$/);
    const text = await (await (await lastReply(d)).$('[data-testid=message-body]')).text();
    assert.ok(text.trim().length > 0, 'the reply has text');
  });

  it('opens a .gguf from the file manager in the running window', async () => {
    // What a file manager does: ask GIO for the type's default app, which
    // runs the desktop entry's `hearth %F`; that second launch hands the
    // file to this one over D-Bus and exits.
    assert.equal(execFileSync('gio', ['info', '-a', 'standard::content-type', other], { encoding: 'utf8' }).match(/content-type: (\S+)/)?.[1], 'application/x-gguf');
    execFileSync('gio', ['open', other], { env: { ...process.env, HEARTH_DATA_DIR: h.dataDir }, stdio: 'inherit', timeout: 30000 });
    await d.waitFor(async () => (await readyModel(d)) === otherName, `the model bar to name ${otherName}`, 120000);
    assert.equal(await (await d.find('[data-testid=app]')).attr('data-other-launches'), '1', 'the running window took the file');
  });
});

describe('launched with a model file', () => {
  const h = new Harness({ port: 4524 });
  let d;
  before(async () => {
    await h.startDriver();
  });
  after(async () => {
    await h.stop();
  });

  it('opens that file instead of the default model', async () => {
    // A fresh data folder, which would otherwise open the default model.
    d = h.driver = await WebDriver.start(h.base, { 'tauri:options': { application: appBinary, args: [other] } });
    let first = null;
    await d.waitFor(async () => (first = await readyModel(d)), 'a model to load', 120000, 50);
    assert.equal(first, otherName, 'the first model loaded is the one named on the command line');
  });
});
