// End to end: the real app binary, the real default model, the real webview,
// driven through tauri-driver under Xvfb. The steps build on each other and
// run in order.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  Harness, Keys, activeConversationId, lastReply, messages, newChat, openChat, send, setSetting, waitForReply,
} from './harness.mjs';

// A reply whose message is exactly this panics inside the worker (a test-only hook).
const PANIC_TRIGGER = '__hearth_test_panic__';
// Links go to the system browser through xdg-open, which runs $BROWSER: a
// script that writes down what it was asked to open.
const opened = join(mkdtempSync(join(tmpdir(), 'hearth-browser-')), 'opened.txt');
const browser = join(dirname(opened), 'browser.sh');
writeFileSync(browser, `#!/bin/sh\necho "$1" >> '${opened}'\n`, { mode: 0o755 });
const h = new Harness({ env: { HEARTH_TEST_PANIC: PANIC_TRIGGER, BROWSER: browser } });
let d;
const chats = {};

const num = async (el, name) => Number(await el.attr(name));
// The engine's own greedy reply on this CPU (its kernels follow the order of
// llama.cpp's build for the CPU, so the words depend on the ISA).
const cli = join(process.env.CARGO_TARGET_DIR ?? join(import.meta.dirname, '../../target'), 'debug', 'hearth-cli');
const greedyReply = (prompt) => JSON.parse(execFileSync(cli, ['generate', '--prompt', prompt, '--temperature', '0', '--json'], { encoding: 'utf8' })).text;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

describe('Hearth end to end', () => {
  before(async () => {
    await h.startDriver();
    d = await h.openApp();
  });

  after(async () => {
    await h.stop();
  });

  it('streams replies in two conversations', async () => {
    chats.a = await newChat(d);
    await setSetting(d, 'temperature', 0);
    await send(d, 'What is 2 + 2?');
    const stats = await waitForReply(d);
    assert.equal(await stats.attr('data-finish'), 'end_token');
    assert.equal(await (await (await lastReply(d)).$('[data-testid=message-body]')).text(), greedyReply('What is 2 + 2?'));
    const title = await (await d.find(`[data-testid=conversation][data-id="${chats.a}"] [data-testid=conversation-title]`)).prop('textContent');
    assert.equal(title, 'What is 2 + 2?');

    chats.b = await newChat(d);
    assert.notEqual(chats.a, chats.b);
    await setSetting(d, 'maxNewTokens', 1500);
    // A seed whose story runs to the limit on every ISA, so Esc always finds it streaming.
    await setSetting(d, 'seed', 3);
    await send(d, 'Write a very long story about a dragon who learns to bake bread.');
    // Tokens arrive while the reply is still streaming.
    const seen = [];
    await d.waitFor(async () => {
      const r = await lastReply(d);
      if ((await r.attr('data-status')) !== 'streaming') return false;
      const text = await (await r.$('[data-testid=message-body]')).text();
      if (text.length > 0 && !seen.includes(text.length)) seen.push(text.length);
      return seen.length >= 3;
    }, 'several streamed updates', 60000, 30);
    assert.ok(seen[2] > seen[0], `text grew while streaming: ${seen}`);
  });

  it('stops a reply mid-stream with Esc', async () => {
    const box = await d.find('[data-testid=composer]');
    await box.type(Keys.ESCAPE);
    const stats = await waitForReply(d, 20000);
    assert.equal(await stats.attr('data-finish'), 'cancelled');
    assert.match(await stats.text(), /stopped by you/);
    const r = await lastReply(d);
    assert.equal(await r.attr('data-status'), 'interrupted');
    const stoppedText = await (await r.$('[data-testid=message-body]')).text();
    await (await r.$('[data-testid=continue]')).click();
    // The same reply grows again, then is stopped again.
    await d.waitFor(async () => {
      const body = await (await lastReply(d)).$('[data-testid=message-body]');
      return (await body.text()).length > stoppedText.length + 20;
    }, 'the reply to continue', 60000, 50);
    assert.equal((await messages(d)).length, 2, 'continuing writes into the same reply');
    await (await d.find('[data-testid=stop]')).click();
    const again = await waitForReply(d, 20000);
    assert.equal(await again.attr('data-finish'), 'cancelled');
    const continued = await (await (await lastReply(d)).$('[data-testid=message-body]')).text();
    assert.ok(continued.startsWith(stoppedText.slice(0, 40)), 'the earlier text is kept');
    // A stopped, continued reply replays exactly as far as it went.
    await (await (await lastReply(d)).$('[data-testid=replay]')).click();
    const result = await d.waitFor(async () => {
      const x = await (await lastReply(d)).$('[data-testid=replay-result]');
      return x && (await x.attr('data-done')) === 'true' ? x : null;
    }, 'the replay', 120000);
    assert.equal(await result.attr('data-matched'), 'true', await result.text());
  });

  it('switching back, the next turn processes only the new tokens', async () => {
    await openChat(d, chats.a);
    const first = await waitForReply(d);
    const firstPrompt = await num(first, 'data-prompt-tokens');
    await send(d, 'And what is 3 + 3?');
    await d.waitFor(async () => (await messages(d)).length === 4, 'the second turn');
    const stats = await waitForReply(d);
    const prompt = await num(stats, 'data-prompt-tokens');
    const processed = await num(stats, 'data-processed-tokens');
    assert.ok(prompt > firstPrompt, `${prompt} > ${firstPrompt}`);
    // The first turn's prompt and reply came from the cache.
    assert.ok(processed < prompt - firstPrompt, `processed ${processed} of ${prompt} (first turn ${firstPrompt})`);
    assert.match(await stats.text(), new RegExp(`processed ${processed} this turn`));
  });

  it('uses the temperature and seed from the settings panel', async () => {
    chats.c = await newChat(d);
    await setSetting(d, 'temperature', '1.3');
    await setSetting(d, 'seed', 4242);
    await setSetting(d, 'maxNewTokens', 12);
    await send(d, 'Say something surprising.');
    const stats = await waitForReply(d);
    assert.equal(await stats.attr('data-seed'), '4242');
    assert.equal(Number(await stats.attr('data-temperature')), 1.3);
    const firstText = await (await (await lastReply(d)).$('[data-testid=message-body]')).text();
    // The same seed and settings give the same reply.
    await (await (await lastReply(d)).$('[data-testid=regenerate]')).click();
    await d.waitFor(async () => (await (await lastReply(d)).attr('data-status')) === 'streaming' || (await (await lastReply(d)).$('[data-testid=versions]')), 'regeneration');
    await waitForReply(d);
    const again = await (await (await lastReply(d)).$('[data-testid=message-body]')).text();
    assert.equal(again, firstText);
    // An out-of-range value is named inline and not saved.
    await setSetting(d, 'temperature', 9);
    const err = await d.find('[data-testid=error-temperature]');
    assert.match(await err.text(), /between 0 and 5/);
    await setSetting(d, 'temperature', '1.3');
    assert.equal(await d.$('[data-testid=error-temperature]'), null);
  });

  it('shows the compute device and refuses one this build cannot use', async () => {
    assert.match(await (await d.find('[data-testid=model-device]')).text(), /· cpu \((portable|avx2|avx512)\)$/);
    const select = await d.find('[data-testid=device]');
    assert.equal(await select.prop('value'), 'auto');
    // This build has no CUDA: the choice is refused inline and nothing changes.
    await d.execute("const s = document.querySelector('[data-testid=device]'); s.value = 'cuda'; s.dispatchEvent(new Event('change', { bubbles: true }));");
    const err = await d.find('[data-testid=device-error]');
    assert.match(await err.text(), /^CUDA is not available/);
    assert.equal(await select.prop('value'), 'auto', 'the refused choice is not shown as chosen');
    assert.match(await (await d.find('[data-testid=model-device]')).text(), /· cpu \((portable|avx2|avx512)\)$/);
  });

  it('editing a message makes a branch with a version switcher', async () => {
    await openChat(d, chats.a);
    const firstUser = (await d.$$('[data-testid=message][data-role=user]'))[0];
    const original = await (await firstUser.$('[data-testid=message-body]')).text();
    await (await firstUser.$('[data-testid=edit-message]')).click();
    const input = await d.find('[data-testid=edit-input]');
    await input.clear();
    await input.type('What is 5 + 5?');
    await (await d.find('[data-testid=edit-save]')).click();
    // Until the branch is shown, the old thread's finished reply is still
    // the last one on the page: waiting for "a reply" alone would find it.
    await d.waitFor(async () => (await messages(d)).length === 2, 'the branch to show', 60000);
    await waitForReply(d);
    const msgs = await messages(d);
    assert.equal(msgs.length, 2, 'the branch starts at the edited message');
    const label = await d.find('[data-testid=message][data-role=user] [data-testid=version-label]');
    assert.equal(await label.text(), '2/2');
    assert.equal(await (await (await d.find('[data-testid=message][data-role=user] [data-testid=message-body]')).text()), 'What is 5 + 5?');
    // The switcher is disabled until the reply's end reaches the page.
    const prev = await d.waitFor(async () => {
      const b = await d.$('[data-testid=message][data-role=user] [data-testid=version-prev]');
      return b && (await b.prop('disabled')) === false ? b : null;
    }, 'the version switcher', 30000);
    await prev.click();
    await d.waitFor(async () => (await (await d.find('[data-testid=version-label]')).text()) === '1/2', 'version 1');
    assert.equal(await (await d.find('[data-testid=message][data-role=user] [data-testid=message-body]')).text(), original);
    assert.equal((await messages(d)).length, 4, 'version 1 keeps its whole thread');
  });

  it('shows HTML written into a reply as text and runs nothing', async () => {
    await openChat(d, chats.c);
    const evil = 'Here: <img src=x onerror="window.__pwned=1"> <script>window.__pwned=2</script> **bold**';
    const reply = await lastReply(d);
    await (await reply.$('[data-testid=edit-message]')).click();
    const input = await d.find('[data-testid=edit-input]');
    await input.clear();
    await input.type(evil);
    await (await d.find('[data-testid=edit-save]')).click();
    await d.waitFor(async () => (await (await (await lastReply(d)).$('[data-testid=message-body]')).text()).includes('<img'), 'the edited reply');
    const body = await (await lastReply(d)).$('[data-testid=message-body]');
    const text = await body.text();
    assert.ok(text.includes('<img src=x onerror="window.__pwned=1">'), text);
    assert.ok(text.includes('<script>window.__pwned=2</script>'), text);
    assert.equal(await body.$('img'), null);
    assert.equal(await body.$('script'), null);
    assert.ok(await body.$('strong'), 'Markdown still renders');
    // A user message with HTML is text as well.
    const shown = (await messages(d)).length;
    await send(d, '<img src=y onerror="window.__pwned=3">hello');
    await d.waitFor(async () => (await messages(d)).length >= shown + 2, 'the new turn', 60000);
    await waitForReply(d);
    assert.equal(await d.$('[data-testid=messages] img'), null);
    await sleep(300);
    assert.equal(await d.execute('return window.__pwned === undefined ? "clean" : String(window.__pwned)'), 'clean');
  });

  it('opens http(s) and mailto links in the system browser, and nothing else', async () => {
    const reply = await lastReply(d);
    await (await reply.$('[data-testid=edit-message]')).click();
    const input = await d.find('[data-testid=edit-input]');
    await input.clear();
    await input.type('See [the docs](https://example.org/docs?q=1), [mail](mailto:help@example.org) and [local](file:///etc/passwd).');
    await (await d.find('[data-testid=edit-save]')).click();
    const link = async (text) => {
      const body = await (await lastReply(d)).$('[data-testid=message-body]');
      for (const a of await body.$$('a')) if ((await a.text()) === text) return a;
      return null;
    };
    await d.waitFor(async () => (await link('the docs')) !== null, 'the edited reply with links');
    for (const text of ['the docs', 'mail', 'local']) {
      const a = await link(text);
      if (a) await a.click();
      await sleep(300);
    }
    await d.waitFor(async () => existsSync(opened) && readFileSync(opened, 'utf8').split('\n').filter(Boolean).length >= 2, 'the browser to be asked', 10000);
    await sleep(500);
    assert.deepEqual(readFileSync(opened, 'utf8').split('\n').filter(Boolean), ['https://example.org/docs?q=1', 'mailto:help@example.org']);
  });

  it('searches, renames, deletes and undoes', async () => {
    const search = await d.find('[data-testid=search]');
    await search.type('dragon');
    await d.waitFor(async () => (await d.$$('[data-testid=conversation]')).length === 1, 'one match');
    assert.equal(Number(await (await d.find('[data-testid=conversation]')).attr('data-id')), chats.b);
    await search.clear();
    await search.type('zzzz-no-such-text');
    await d.waitFor(async () => (await d.$$('[data-testid=conversation]')).length === 0, 'no match');
    await search.clear();
    await search.type(' ');
    await search.type(Keys.BACKSPACE);
    await d.waitFor(async () => (await d.$$('[data-testid=conversation]')).length === 3, 'all chats again');

    const row = await d.find(`[data-testid=conversation][data-id="${chats.c}"]`);
    await (await row.$('button[title=Rename]')).click();
    const input = await d.find('[data-testid=rename-input]');
    // Whether the old title is selected or the caret is at its end, this replaces it.
    await input.type(Keys.BACKSPACE.repeat(80) + 'Surprises' + Keys.ENTER);
    let shown;
    await d.waitFor(async () => (shown = await (await d.find(`[data-testid=conversation][data-id="${chats.c}"] [data-testid=conversation-title]`)).prop('textContent')) === 'Surprises', `the new title (shown: ${shown})`);

    await (await (await d.find(`[data-testid=conversation][data-id="${chats.c}"]`)).$('[data-testid=delete-conversation]')).click();
    await d.waitFor(async () => (await d.$$(`[data-testid=conversation][data-id="${chats.c}"]`)).length === 0, 'the chat to go');
    await (await d.find('[data-testid=undo-delete]')).click();
    await d.find(`[data-testid=conversation][data-id="${chats.c}"]`);
    await openChat(d, chats.c);
    assert.ok((await messages(d)).length >= 2, 'undo brings the messages back');
  });

  it('opens and scrolls a 1,000-message thread', async () => {
    await h.closeApp();
    const id = Number(execFileSync('python3', [join(import.meta.dirname, 'seed_long_thread.py'), join(h.dataDir, 'hearth.db'), '1000']).toString());
    d = await h.openApp();
    const started = Date.now();
    await openChat(d, id);
    await d.waitFor(async () => (await d.$$('[data-testid=message]')).length > 0, 'the thread', 30000);
    const openMs = Date.now() - started;
    const last = await d.$$('[data-testid=message]');
    assert.match(await (await last[last.length - 1].$('[data-testid=message-body]')).text(), /Answer 499\./);
    // Scroll to the top, page after page, timing each jump until it paints.
    const frames = [];
    for (let i = 0; i < 40; i++) {
      frames.push(await d.execute(
        `const m = document.querySelector('[data-testid=messages]'); const t = performance.now();
         m.scrollTop = 0; m.dispatchEvent(new Event('scroll'));
         return new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now() - t))));`,
      ));
      if (await d.$('[data-testid=show-earlier]') === null) break;
    }
    const first = (await d.$$('[data-testid=message]'))[0];
    assert.equal(await (await first.$('[data-testid=message-body]')).text(), 'Question 0: how do I sort a list in Python?');
    assert.equal((await d.$$('[data-testid=message]')).length, 1000);
    const worst = Math.max(...frames);
    console.log(`# long thread: opened in ${openMs} ms; ${frames.length} jumps to the top, slowest ${worst.toFixed(0)} ms, median ${frames.sort((a, b) => a - b)[frames.length >> 1].toFixed(0)} ms`);
    assert.ok(openMs < 5000, `opening took ${openMs} ms`);
    assert.ok(worst < 1500, `a jump took ${worst} ms`);
  });

  it('shows the prompt being read and stops within a chunk during a long prefill', async () => {
    // The 1,000-message thread, kept to its latest turns: ~7,500 tokens to read cold.
    await d.execute("const s = document.querySelector('[data-testid=setting-overflow]'); s.value = 'rollingWindow'; s.dispatchEvent(new Event('change', { bubbles: true }));");
    await sleep(400);
    await send(d, 'And how do I sort it in reverse?');
    const read = await d.waitFor(async () => {
      const s = await d.$('[data-testid=queue-status]');
      const m = s && (await s.text()).match(/Reading the conversation… ([\d,]+) \/ ([\d,]+) tokens/);
      return m && Number(m[1].replace(/,/g, '')) > 0 ? m : null;
    }, 'prompt progress', 120000, 50);
    const total = Number(read[2].replace(/,/g, ''));
    assert.ok(total > 4000, `the prompt to read is long: ${read[0]}`);
    const stopped = Date.now();
    await (await d.find('[data-testid=stop]')).click();
    const stats = await waitForReply(d, 30000);
    const waited = Date.now() - stopped;
    assert.equal(await stats.attr('data-finish'), 'cancelled');
    console.log(`# stop during a ${total}-token prefill: reply ended ${waited} ms after the click`);
    // One 512-token chunk, not the rest of the prompt.
    assert.ok(waited < 15000, `stopping took ${waited} ms`);
  });

  it('a reply that panics fails alone; the next conversation streams normally', async () => {
    const broken = await newChat(d);
    await send(d, PANIC_TRIGGER);
    const failed = await waitForReply(d, 30000);
    assert.equal(await failed.attr('data-finish'), 'error');
    assert.match(await failed.text(), /internal error/);
    await newChat(d);
    await setSetting(d, 'temperature', 0);
    await send(d, 'What is 2 + 2?');
    const ok = await waitForReply(d);
    assert.equal(await ok.attr('data-finish'), 'end_token');
    // The conversation that failed is free again.
    await openChat(d, broken);
    const before = (await messages(d)).length;
    await send(d, 'What is 2 + 2?');
    await d.waitFor(async () => (await messages(d)).length >= before + 2, 'the new turn');
    const again = await waitForReply(d);
    assert.notEqual(await again.attr('data-finish'), 'error', await again.text());
  });

  it('keeps everything across a restart, and the cache: the next turn runs only its new tokens', async () => {
    const titles = async () => Promise.all((await d.$$('[data-testid=conversation-title]')).map((e) => e.prop('textContent')));
    chats.d = await newChat(d);
    await setSetting(d, 'temperature', 0);
    await send(d, 'What is 2 + 2?');
    const firstPrompt = await num(await waitForReply(d), 'data-prompt-tokens');
    // A sampled reply, to replay after the restart.
    chats.e = await newChat(d);
    await setSetting(d, 'temperature', 0.9);
    await send(d, 'Name three colours.');
    await waitForReply(d);
    const before = await titles();
    await h.closeApp();
    d = await h.openApp();
    await d.waitFor(async () => (await titles()).length === before.length, 'the chat list');
    assert.deepEqual(await titles(), before);
    assert.ok(before.includes('Surprises'));
    await openChat(d, chats.a);
    assert.equal((await messages(d)).length, 4);
    await openChat(d, chats.b);
    assert.equal(await (await lastReply(d)).attr('data-status'), 'interrupted');

    // The cache saved before the restart is read back from disk.
    const badge = async () => (await d.find(`[data-testid=conversation][data-id="${chats.d}"] [data-testid=cache-state]`)).attr('data-state');
    assert.equal(await badge(), 'saved');
    await openChat(d, chats.d);
    await send(d, 'And what is 3 + 3?');
    await d.waitFor(async () => (await messages(d)).length === 4, 'the turn after the restart');
    const stats = await waitForReply(d);
    const prompt = await num(stats, 'data-prompt-tokens');
    const processed = await num(stats, 'data-processed-tokens');
    assert.ok(processed < prompt - firstPrompt, `after a restart: processed ${processed} of ${prompt} (first turn ${firstPrompt})`);
    await d.waitFor(async () => (await badge()) === 'warm', 'the cache to show as in memory');
  });

  it('replays a sampled reply after the restart: every token matches, and the record exports', async () => {
    await openChat(d, chats.e);
    const reply = await lastReply(d);
    const id = Number(await reply.attr('data-id'));
    const text = await (await reply.$('[data-testid=message-body]')).text();
    await (await reply.$('[data-testid=replay]')).click();
    const result = await d.waitFor(async () => {
      const r = await (await lastReply(d)).$('[data-testid=replay-result]');
      return r && (await r.attr('data-done')) === 'true' ? r : null;
    }, 'the replay to end', 120000);
    assert.equal(await result.attr('data-matched'), 'true', await result.text());
    assert.match(await result.text(), /^Replay matched all \d+ tokens/);
    // Nothing about the reply changed.
    assert.equal(await (await (await lastReply(d)).$('[data-testid=message-body]')).text(), text);

    // The record, with the prompt ids it names by hash, for hearth-cli replay.
    const file = join(mkdtempSync(join(tmpdir(), 'hearth-record-')), 'reply.json');
    const done = await d.executeAsync(
      'const [c, r, p, cb] = arguments; window.__TAURI_INTERNALS__.invoke("chat_export_replay", { conversationId: c, replyId: r, path: p }).then(() => cb("ok"), (e) => cb(JSON.stringify(e)));',
      [chats.e, id, file],
    );
    assert.equal(done, 'ok');
    const exported = JSON.parse(readFileSync(file, 'utf8'));
    assert.equal(exported.format, 'hearth-replay');
    assert.equal(exported.promptIds.length, exported.record.promptTokens);
    const ids = Buffer.alloc(4 * exported.promptIds.length);
    exported.promptIds.forEach((t, i) => ids.writeUInt32LE(t, 4 * i));
    assert.equal(createHash('sha256').update(ids).digest('hex'), exported.record.promptSha256);
    assert.ok(exported.record.tokens.length > 0 && exported.record.passes.length > 0);
  });

  it('shows a token\'s alternatives, and continuing from one branches there, running only what follows', async () => {
    await newChat(d);
    await setSetting(d, 'temperature', 0);
    await send(d, 'Name a colour.');
    await waitForReply(d);
    const reply = await lastReply(d);
    await (await reply.$('[data-testid=show-tokens]')).click();
    const tokens = await d.waitFor(async () => {
      const t = await d.$$('[data-testid=token]');
      return t.length > 4 ? t : null;
    }, 'the token view');
    const texts = await Promise.all(tokens.map((t) => t.prop('textContent')));
    await tokens[2].click();
    const alternatives = await d.waitFor(async () => {
      const a = await d.$$('[data-testid=alternative]');
      return a.length > 0 ? a : null;
    }, 'the alternatives');
    const label = await alternatives[0].text();
    const chosen = JSON.parse(label.slice(0, label.lastIndexOf('"') + 1));
    await alternatives[0].click();
    await d.waitFor(async () => (await (await (await lastReply(d)).$('[data-testid=version-label]'))?.text()) === '2/2', 'the branch as version 2');
    const stats = await waitForReply(d);
    assert.equal(await num(stats, 'data-processed-tokens'), 1, 'only the chosen token ran before the rest');
    const body = await (await (await lastReply(d)).$('[data-testid=message-body]')).text();
    const kept = (texts[0] + texts[1] + chosen).trim();
    assert.ok(body.startsWith(kept), `the branch ${JSON.stringify(body)} keeps ${JSON.stringify(kept)}`);
  });

  it('Generate 4 streams four variants side by side; picking one continues from its cache', async () => {
    await newChat(d);
    await setSetting(d, 'temperature', 1);
    await setSetting(d, 'maxNewTokens', 40);
    const setCount = (n) => d.execute('const s = document.querySelector("[data-testid=variant-count]"); s.value = arguments[0]; s.dispatchEvent(new Event("change"));', [String(n)]);
    await setCount(4);
    await send(d, 'Name a colour.');
    await d.waitFor(async () => (await d.$$('[data-testid=variant]')).length === 4, 'four variants streaming', 60000);
    const first = await waitForReply(d);
    const firstPrompt = await num(first, 'data-prompt-tokens');
    // Kept as four versions of the reply, the first one shown.
    const label = async () => (await (await lastReply(d)).$('[data-testid=version-label]')).text();
    assert.equal(await label(), '1/4');
    const seeds = new Set();
    for (let i = 0; i < 4; i++) {
      seeds.add(await (await (await lastReply(d)).$('[data-testid=reply-stats]')).attr('data-seed'));
      if (i < 2) {
        await (await (await lastReply(d)).$('[data-testid=version-next]')).click();
        await d.waitFor(async () => (await label()) === `${i + 2}/4`, `version ${i + 2}`);
      } else if (i === 2) {
        // Pick the third.
        break;
      }
    }
    assert.equal(seeds.size, 3, 'each variant has its own seed');
    const picked = await num(await (await lastReply(d)).$('[data-testid=reply-stats]'), 'data-generated-tokens');
    await setCount(1);
    await send(d, 'Why that one?');
    await d.waitFor(async () => (await messages(d)).length === 4, 'the next turn');
    const next = await waitForReply(d);
    const prompt = await num(next, 'data-prompt-tokens');
    const processed = await num(next, 'data-processed-tokens');
    // Only the new message (and the picked reply's last token) runs: its cache was kept.
    assert.ok(processed <= prompt - firstPrompt - picked + 2, `processed ${processed} of ${prompt}; first prompt ${firstPrompt}, picked reply ${picked} tokens`);
  });

  it('two conversations stream at once: a short reply ends while a long one goes on', async () => {
    const long = await newChat(d);
    // A seed whose story runs to the limit on every ISA's kernels (a random
    // one ends by itself about one time in three, sooner than the short reply).
    await setSetting(d, 'maxNewTokens', 1500);
    await setSetting(d, 'seed', 3);
    await send(d, 'Write a long story about a lighthouse keeper and a storm.');
    await d.waitFor(async () => (await (await lastReply(d))?.$('[data-testid=message-body]'))?.text().then((t) => t.length > 20), 'the long reply streaming', 60000);
    const short = await newChat(d);
    await setSetting(d, 'temperature', 0);
    await send(d, 'What is 2 + 2?');
    const stats = await waitForReply(d, 60000);
    assert.equal(await stats.attr('data-finish'), 'end_token');
    // No queue: it started at once, and the long one is still writing.
    assert.ok(await d.$(`[data-testid=conversation][data-id="${long}"] .busy`), 'the long reply went on beside it');
    assert.equal(await d.$(`[data-testid=conversation][data-id="${short}"] .busy`), null);
    await openChat(d, long);
    const body = async () => (await (await lastReply(d)).$('[data-testid=message-body]')).text();
    const before = (await body()).length;
    await d.waitFor(async () => (await body()).length > before, 'the long reply still growing', 30000);
    await (await d.find('[data-testid=stop]')).click();
    await waitForReply(d);
  });

  it('a reply cut off by SIGKILL comes back as interrupted, with everything before it', async () => {
    const id = await newChat(d);
    await setSetting(d, 'maxNewTokens', 1500);
    // The seed whose story runs to the limit on every ISA (with a random one,
    // a story may end before the 200 characters this test waits for).
    await setSetting(d, 'seed', 3);
    await send(d, 'Tell me a long story about a lighthouse keeper.');
    let streamed = '';
    await d.waitFor(async () => {
      const reply = await lastReply(d);
      streamed = await (await reply.$('[data-testid=message-body]')).text();
      if (streamed.length > 200) return true;
      const status = await reply.attr('data-status');
      if (status !== 'streaming') throw new Error(`the reply is ${status} after ${streamed.length} characters: ${streamed}`);
      return false;
    }, 'a good part of the reply', 60000, 50);
    // The reply is flushed at least every 250 ms.
    await sleep(700);
    h.killApp();
    await h.closeApp();
    d = await h.openApp();
    await openChat(d, id);
    const msgs = await messages(d);
    assert.equal(msgs.length, 2);
    assert.equal(await (await msgs[0].$('[data-testid=message-body]')).text(), 'Tell me a long story about a lighthouse keeper.');
    const reply = msgs[1];
    assert.equal(await reply.attr('data-status'), 'interrupted');
    const saved = await (await reply.$('[data-testid=message-body]')).text();
    assert.ok(saved.length >= 150, `saved ${saved.length} chars of the streamed ${streamed.length}`);
    assert.match(await (await reply.$('[data-testid=reply-stats]')).text(), /interrupted/);
    // Earlier conversations are untouched.
    await openChat(d, chats.a);
    assert.equal((await messages(d)).length, 4);
    assert.ok(await activeConversationId(d));
  });

  it('drafts tokens from the conversation and shows what the drafts did', async () => {
    chats.s = await newChat(d);
    assert.equal(await (await d.find('[data-testid=setting-speculation]')).prop('value'), 'auto');
    await setSetting(d, 'temperature', 0);
    await setSetting(d, 'maxNewTokens', 60);
    await send(d, 'Repeat exactly, twice: the quick brown fox jumps over the lazy dog near the river bank.');
    const stats = await waitForReply(d);
    const drafted = await num(stats, 'data-drafted');
    const accepted = await num(stats, 'data-accepted');
    assert.ok(drafted > 0 && accepted > 0 && accepted <= drafted, `${accepted} of ${drafted} drafted tokens taken`);
    assert.match(await stats.text(), new RegExp(`drafts: ${accepted} of ${drafted} taken`));

    // A draft model picked from the library (the loaded model's own file:
    // the same vocabulary): the next reply drafts with it.
    const pick = (testid, value) => d.execute(
      'const s = document.querySelector(`[data-testid=${arguments[0]}]`); s.value = arguments[1]; s.dispatchEvent(new Event("change", { bubbles: true }));',
      [testid, value]);
    await pick('setting-speculation', 'draft');
    const choices = await d.waitFor(async () => {
      const values = await d.execute('return [...document.querySelectorAll("[data-testid=setting-draftModel] option")].map((o) => o.value).filter(Boolean);');
      return values.length > 0 && values;
    }, 'the library listed as draft models');
    const loaded = await d.executeAsync('const cb = arguments[0]; window.__TAURI_INTERNALS__.invoke("models_library").then((r) => cb(JSON.stringify(r)), (e) => cb("[]"));');
    const model = choices.find((c) => c.endsWith('SmolLM2-135M-Instruct.Q4_1.gguf')) ?? choices[0];
    assert.ok(JSON.parse(loaded).some((m) => m.path === model), `${model} is in the library`);
    await pick('setting-draftModel', model);
    await send(d, 'Now repeat it once more, exactly.');
    const withModel = await waitForReply(d);
    assert.ok(await num(withModel, 'data-drafted') > 0, 'the draft model drafted');
    assert.match(await withModel.text(), /drafts: \d+ of \d+ taken/);
  });
});
