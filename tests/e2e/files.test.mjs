// Conversations as files between two data folders (two Hearths, as on two
// machines): a branched conversation round-trips through JSON, a .hearth
// bundle resumes with no prefill, and a reply with thinking shows it folded.
// The file dialogs are the OS's; the tests call the commands they lead to.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Harness, lastReply, messages, newChat, openChat, send, setSetting, waitForReply } from './harness.mjs';

const files = mkdtempSync(join(tmpdir(), 'hearth-files-'));
const here = new Harness({ port: 4530 });
const there = new Harness({ port: 4534 });
let d;

/** Calls a command as the UI does; resolves to its answer or `{error}`. */
async function invoke(driver, cmd, args) {
  const out = await driver.executeAsync(
    'const [cmd, args, cb] = arguments; window.__TAURI_INTERNALS__.invoke(cmd, args).then((r) => cb(JSON.stringify({ ok: r ?? null })), (e) => cb(JSON.stringify({ error: e })));',
    [cmd, args],
  );
  const parsed = JSON.parse(out);
  if ('error' in parsed) throw new Error(`${cmd}: ${JSON.stringify(parsed.error)}`);
  return parsed.ok;
}

/** Reloads the window so it lists what an import added, and waits for the model. */
async function reload(driver) {
  await driver.execute('location.reload()');
  await new Promise((r) => setTimeout(r, 500));
  await driver.waitFor(
    async () => (await (await driver.find('[data-testid=model-status]')).attr('data-state')) === 'ready',
    'the model after the reload',
    120000,
  );
}

const num = async (el, attr) => Number(await el.attr(attr));
const withoutTime = (json) => ({ ...json, exportedAt: 0 });

describe('conversations as files', () => {
  let branched;
  let bundled;

  before(async () => {
    await here.startDriver();
    await there.startDriver();
    d = await here.openApp();
  });
  after(async () => {
    await here.stop();
    await there.stop();
  });

  it('writes a branched conversation and a cached one here', async () => {
    branched = await newChat(d);
    await setSetting(d, 'temperature', 0);
    await setSetting(d, 'maxNewTokens', 12);
    await send(d, 'What is 2 + 2?');
    await waitForReply(d);
    await (await (await lastReply(d)).$('[data-testid=regenerate]')).click();
    await d.waitFor(async () => (await (await (await lastReply(d)).$('[data-testid=version-label]'))?.text()) === '2/2', 'a second version');
    await waitForReply(d);
    await invoke(d, 'conversations_export', { id: branched, format: 'json', path: join(files, 'branched.json') });
    await invoke(d, 'conversations_export', { id: branched, format: 'markdown', path: join(files, 'branched.md') });
    assert.match(readFileSync(join(files, 'branched.md'), 'utf8'), /^# What is 2 \+ 2\?\n\n## User\n\nWhat is 2 \+ 2\?\n\n## Assistant\n\n/);

    bundled = await newChat(d);
    await setSetting(d, 'temperature', 0);
    await setSetting(d, 'maxNewTokens', 24);
    await send(d, 'Tell me about the sea in two sentences.');
    await waitForReply(d);
    await invoke(d, 'conversations_export', { id: bundled, format: 'bundle', path: join(files, 'sea.hearth') });
    await here.closeApp();
  });

  it('imports the branched conversation elsewhere with every version, and exports it again the same', async () => {
    d = await there.openApp();
    const result = await invoke(d, 'conversations_import', { path: join(files, 'branched.json') });
    assert.deepEqual([result.conversationIds.length, result.skippedDuplicates, result.cache], [1, 0, 'none']);
    const id = result.conversationIds[0];
    await reload(d);
    await openChat(d, id);
    await d.waitFor(async () => (await messages(d)).length === 2, 'the imported thread');
    assert.equal(await (await (await lastReply(d)).$('[data-testid=version-label]')).text(), '2/2');
    await invoke(d, 'conversations_export', { id, format: 'json', path: join(files, 'again.json') });
    const first = JSON.parse(readFileSync(join(files, 'branched.json'), 'utf8'));
    const again = JSON.parse(readFileSync(join(files, 'again.json'), 'utf8'));
    assert.equal(first.messages.length, 3);
    assert.deepEqual(withoutTime(again), withoutTime(first));
    // Imported twice, it is not added twice.
    const twice = await invoke(d, 'conversations_import', { path: join(files, 'branched.json') });
    assert.deepEqual([twice.conversationIds.length, twice.skippedDuplicates], [0, 1]);
  });

  it('resumes a bundle from the other data folder with no prefill', async () => {
    const result = await invoke(d, 'conversations_import', { path: join(files, 'sea.hearth') });
    assert.equal(result.cache, 'restored', result.cacheNote);
    const id = result.conversationIds[0];
    await reload(d);
    const badge = await d.find(`[data-testid=conversation][data-id="${id}"] [data-testid=cache-state]`);
    assert.equal(await badge.attr('data-state'), 'saved');
    await openChat(d, id);
    const before = await num(await (await lastReply(d)).$('[data-testid=reply-stats]'), 'data-prompt-tokens');
    await send(d, 'And about rivers?');
    await d.waitFor(async () => (await messages(d)).length === 4, 'the next turn');
    const stats = await waitForReply(d);
    const prompt = await num(stats, 'data-prompt-tokens');
    const processed = await num(stats, 'data-processed-tokens');
    assert.ok(processed < prompt - before, `processed ${processed} of ${prompt} (the bundle's turn had ${before})`);
  });

  it('shows a reply\'s thinking folded above its answer, as text', async () => {
    const plain = join(files, 'thinking.json');
    writeFileSync(plain, JSON.stringify([
      { role: 'user', content: 'What is 2 + 2?' },
      { role: 'assistant', content: '<think>\nTwo and two. <img src=x onerror="document.title=\'pwned\'">\n</think>\n\nThe answer is **4**.' },
    ]));
    const result = await invoke(d, 'conversations_import', { path: plain });
    const id = result.conversationIds[0];
    await reload(d);
    await openChat(d, id);
    const reply = await d.waitFor(async () => lastReply(d), 'the imported reply');
    const block = await reply.$('[data-testid=thinking]');
    assert.ok(block, 'a thinking block');
    assert.equal(await block.attr('data-open'), 'false');
    assert.match(await (await reply.$('[data-testid=thinking-summary]')).text(), /Thought/);
    assert.equal(await (await reply.$('[data-testid=message-body]')).text(), 'The answer is 4.');
    await (await reply.$('[data-testid=thinking-summary]')).click();
    await d.waitFor(async () => (await block.attr('data-open')) === 'true', 'the block to open');
    assert.match(await (await reply.$('[data-testid=thinking-body]')).text(), /<img src=x onerror=/);
    assert.equal(await d.execute('return document.title'), 'Hearth');
    assert.equal((await reply.$$('img')).length, 0);
  });

  it('lists the models opened here with facts from their headers, and offers a chat\'s own model back', async () => {
    // The real Gemma 3 file (./hearth test fetches it), a second architecture.
    const gemma = execFileSync('scripts/fetch-gemma.sh', { encoding: 'utf8' }).trim();
    const status = async () => d.find('[data-testid=model-status]');
    await invoke(d, 'models_open', { path: gemma });
    await d.waitFor(async () => (await (await status()).attr('data-state')) === 'ready' && /gemma3/.test(await (await status()).text()), 'Gemma 3 to load', 120000);
    await (await d.find('[data-testid=open-models]')).click();
    const row = async (name) => {
      for (const r of await d.$$('[data-testid=model-row]')) if ((await r.attr('data-path')).endsWith(name)) return r;
      return null;
    };
    const g = await d.waitFor(async () => row('gemma-3-270m-q4_k_m.gguf'), 'Gemma 3 in the Models view');
    const s = await d.waitFor(async () => row('SmolLM2-135M-Instruct.Q4_1.gguf'), 'the default model in the Models view');
    const fact = async (r, id) => (await r.$(`[data-testid=${id}]`)).text();
    assert.equal(await fact(s, 'model-arch'), 'llama');
    assert.equal(await fact(s, 'model-params'), '135M');
    assert.match(await fact(s, 'model-quants'), /^Q4_1 69% · Q8_0 31%/);
    assert.equal(await fact(s, 'model-context'), '8,192 tokens');
    assert.match(await fact(s, 'model-memory'), /GB at [\d,]+ tokens/);
    assert.equal(await fact(g, 'model-arch'), 'gemma3');
    assert.match(await fact(g, 'model-quants'), /Q4_K|Q5_0|Q8_0|Q6_K/);
    assert.equal(await fact(g, 'model-context'), '32,768 tokens');
    await (await d.find('[data-testid=models-close]')).click();

    // The chat resumed from the bundle was written with the default model: it offers it back.
    for (const c of await d.$$('[data-testid=conversation]')) {
      const id = Number(await c.attr('data-id'));
      await openChat(d, id);
      const notice = await d.$('[data-testid=model-mismatch]');
      if (notice) {
        assert.match(await notice.text(), /Switch to SmolLM2-135M-Instruct/);
        // The button is disabled while the chat is busy; a click then does nothing.
        const button = await d.find('[data-testid=model-mismatch-switch]');
        await d.waitFor(async () => (await button.attr('disabled')) === null, 'the switch button to be enabled');
        await button.click();
        // On a timeout, say what the bar and any error toast showed instead.
        let seen = '';
        await d.waitFor(async () => {
          const s = await status();
          if ((await s.attr('data-state')) === 'ready' && /llama/.test(await s.text())) return true;
          const toast = await d.$('[data-testid=error-toast]');
          seen = `${await s.attr('data-state')}: ${await s.text()}${toast ? ` / toast: ${await toast.text()}` : ''}`;
          return false;
        }, 'the chat\'s own model', 120000).catch((e) => { throw new Error(`${e.message}; the bar showed ${seen}`); });
        await d.waitFor(async () => (await d.$('[data-testid=model-mismatch]')) === null, 'the notice to go');
        return;
      }
    }
    assert.fail('no conversation offered its own model back');
  });

  it('refuses a hostile bundle and changes nothing', async () => {
    const before = (await d.$$('[data-testid=conversation]')).length;
    const evil = join(files, 'evil.hearth');
    writeFileSync(evil, Buffer.from('PK\x03\x04 truncated', 'latin1'));
    await assert.rejects(invoke(d, 'conversations_import', { path: evil }), /badImport/);
    await reload(d);
    // The list as it was, once it has loaded again (not before: under load it takes a while).
    const listed = async () => (await d.$$('[data-testid=conversation]')).length;
    await d.waitFor(async () => (await listed()) >= before, 'the conversations listed again', 30000);
    assert.equal(await listed(), before);
  });
});
