// End to end on gpt-oss's Harmony format: a gpt-oss file with the real
// architecture, vocabulary and chat template, whose weights are built to
// write one Harmony reply (crates/engine/tests/common/o200k.rs, written by
// the engine's `scripted_gpt_oss` example, which `cargo test` builds). The
// reply's analysis folds into Thinking, its final message is the answer,
// no markup shows, and the reasoning effort is a setting of the chat.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { activeConversationId, Harness, lastReply, newChat, send, waitForReply } from './harness.mjs';

const targetDir = process.env.CARGO_TARGET_DIR ?? join(import.meta.dirname, '../../target');
const writer = join(targetDir, 'debug', 'examples', 'scripted_gpt_oss');
const model = join(mkdtempSync(join(tmpdir(), 'hearth-harmony-')), 'scripted-gpt-oss.gguf');
const h = new Harness({ port: 4564, env: { HEARTH_MODEL: model } });
const THINKING = 'The user says hi.';
const ANSWER = 'Hello! How can I help?';
let d;

/** The open chat's saved settings. */
async function savedSettings(d) {
  const id = await activeConversationId(d);
  return JSON.parse(await d.executeAsync(
    'const [id, cb] = arguments; window.__TAURI_INTERNALS__.invoke("settings_get", { conversationId: id }).then((r) => cb(JSON.stringify(r)), (e) => cb(JSON.stringify({ error: e })));',
    [id],
  ));
}

async function checkReply(reply) {
  const block = await reply.$('[data-testid=thinking]');
  assert.ok(block, 'a thinking block');
  assert.equal(await block.attr('data-open'), 'false', 'folded');
  await (await reply.$('[data-testid=thinking-summary]')).click();
  assert.equal(await (await reply.$('[data-testid=thinking-body]')).text(), THINKING);
  await (await reply.$('[data-testid=thinking-summary]')).click();
  const body = await (await reply.$('[data-testid=message-body]')).text();
  assert.equal(body.trim(), ANSWER);
  assert.ok(!(await reply.text()).includes('<|'), 'no Harmony markup shows');
}

describe('gpt-oss: Harmony', () => {
  before(async () => {
    execFileSync(writer, [model, THINKING, ANSWER]);
    await h.startDriver();
    d = await h.openApp();
  });

  after(async () => {
    await h.stop();
    // The written model (40 MB) goes with its folder, as the harness's data folders do.
    rmSync(dirname(model), { recursive: true, force: true });
  });

  it('folds the analysis into Thinking and shows the final message as the answer', async () => {
    await newChat(d);
    await send(d, 'Hi');
    await waitForReply(d);
    await checkReply(await lastReply(d));
  });

  it('offers the reasoning effort, keeps it with the chat, and the next turn still answers', async () => {
    const select = await d.find('[data-testid=setting-reasoningEffort]');
    assert.equal(await select.prop('value'), 'medium');
    await d.execute("const s = document.querySelector('[data-testid=setting-reasoningEffort]'); s.value = 'high'; s.dispatchEvent(new Event('change', { bubbles: true }));");
    await d.waitFor(async () => (await savedSettings(d)).reasoningEffort === 'high', 'the effort to be saved');
    await send(d, 'Thanks');
    await d.waitFor(async () => (await d.$$('[data-testid=message][data-role=assistant]')).length === 2, 'the second reply');
    await waitForReply(d);
    await checkReply(await lastReply(d));
    if (process.env.HEARTH_SCREENSHOT) execFileSync('import', ['-window', 'root', process.env.HEARTH_SCREENSHOT]);
  });
});
