// End to end on a Qwen 3.5 hybrid with experts (recurrent Gated DeltaNet
// layers, gated attention, a shared expert), random weights written here by
// hearth-cli: a chat streams, is edited, and continues reading only its new
// tokens, because the cache keeps checkpoints of the recurrent state; the
// Models view shows the experts and the state.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Harness, messages, newChat, send, setSetting, waitForReply } from './harness.mjs';

const cli = join(process.env.CARGO_TARGET_DIR ?? join(import.meta.dirname, '../../target'), 'debug', 'hearth-cli');
const model = join(mkdtempSync(join(tmpdir(), 'hearth-hybrid-')), 'qwen35moe-random.gguf');
const h = new Harness({ port: 4544, env: { HEARTH_MODEL: model } });
let d;
const num = async (el, name) => Number(await el.attr(name));

describe('a hybrid model with experts', () => {
  before(async () => {
    execFileSync(cli, [
      'write-random-model', '--out', model, '--layers', '8', '--embd', '256', '--heads', '4', '--kv-heads', '2',
      '--head-dim', '64', '--ffn', '256', '--hybrid', '--ssm-state', '64', '--ssm-k-heads', '2', '--ssm-v-heads', '4',
      '--rope-dims', '16', '--experts', '8', '--experts-used', '2', '--expert-ffn', '128', '--dtype', 'q8_0',
    ]);
    await h.startDriver();
    d = await h.openApp();
  });

  after(async () => {
    await h.stop();
    // The written model goes with its folder, as the harness's data folders do.
    rmSync(dirname(model), { recursive: true, force: true });
  });

  it('streams, and the next turn reads only its new tokens', async () => {
    await newChat(d);
    await setSetting(d, 'temperature', 0);
    await setSetting(d, 'maxNewTokens', 12);
    await send(d, 'Tell me about the sea.');
    const first = await waitForReply(d);
    const firstPrompt = await num(first, 'data-prompt-tokens');
    assert.equal(await num(first, 'data-processed-tokens'), firstPrompt);
    await send(d, 'And about the sky?');
    await d.waitFor(async () => (await messages(d)).length === 4, 'the second turn');
    const stats = await waitForReply(d);
    const prompt = await num(stats, 'data-prompt-tokens');
    const processed = await num(stats, 'data-processed-tokens');
    // The first turn's prompt and reply came from the cache's checkpoint at the turn's end.
    assert.ok(processed < prompt - firstPrompt, `processed ${processed} of ${prompt} (first turn ${firstPrompt})`);
  });

  it('an edit of the last message reads from the checkpoint before it, not the whole chat', async () => {
    const users = await d.$$('[data-testid=message][data-role=user]');
    const last = users[users.length - 1];
    await (await last.$('[data-testid=edit-message]')).click();
    const input = await d.find('[data-testid=edit-input]');
    await input.clear();
    await input.type('And about the mountains?');
    await (await d.find('[data-testid=edit-save]')).click();
    await d.waitFor(async () => {
      const m = await messages(d);
      if (m.length !== 4) return false;
      const body = await (await m[2].$('[data-testid=message-body]')).text();
      return body === 'And about the mountains?';
    }, 'the edited branch to show', 60000);
    const stats = await waitForReply(d);
    const prompt = await num(stats, 'data-prompt-tokens');
    const processed = await num(stats, 'data-processed-tokens');
    const firstPrompt = await num((await d.$$('[data-testid=reply-stats]'))[0], 'data-prompt-tokens');
    assert.ok(processed > 0 && processed < prompt - firstPrompt, `processed ${processed} of ${prompt} (first turn ${firstPrompt})`);
  });

  it('the Models view shows total and active parameters and the recurrent state', async () => {
    await (await d.find('[data-testid=open-models]')).click();
    const row = await d.waitFor(async () => {
      for (const r of await d.$$('[data-testid=model-row]')) if ((await r.attr('data-path')) === model) return r;
      return null;
    }, 'the hybrid in the Models view');
    const fact = async (id) => (await row.$(`[data-testid=${id}]`)).text();
    assert.equal(await fact('model-arch'), 'qwen35moe');
    assert.match(await fact('model-params'), / · .* active \(2 of 8 experts\)$/);
    assert.match(await fact('model-recurrent'), /per checkpoint, up to \d+/);
    assert.match(await fact('model-memory'), /GB at [\d,]+ tokens/);
    await (await d.find('[data-testid=models-close]')).click();
  });
});
