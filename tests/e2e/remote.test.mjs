// A conversation on a remote OpenAI-compatible endpoint: another Hearth
// (`hearth-cli serve`, started here) added in Settings with its key, chosen
// in the model bar, chatted with, stopped, remembered after a restart, and
// killed mid-reply (the partial reply stays, interrupted).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Harness, lastReply, newChat, send, setSetting, waitForReply } from './harness.mjs';

const h = new Harness({ port: 4504 });
const cli = join(process.env.CARGO_TARGET_DIR ?? join(import.meta.dirname, '../../target'), 'debug', 'hearth-cli');
const key = `peer-${process.pid}`;
let d;
let peer;
let peerUrl;

/** Starts `hearth-cli serve` on a free port; resolves with its base URL. */
function startPeer() {
  peer = spawn(cli, ['serve', '--port', '0', '--api-key', key, '--threads', '1'], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    peer.stdout.on('data', (b) => {
      out += b;
      const m = out.match(/ on (http\S+)/);
      if (m) resolve(m[1]);
    });
    peer.once('exit', (code) => reject(new Error(`hearth-cli serve exited (${code})`)));
  });
}

/** Sends `text` and waits until its own reply has streamed some text. */
async function sendAndStream(text) {
  const before = (await d.$$('[data-testid=message][data-role=assistant]')).length;
  await send(d, text);
  await d.waitFor(async () => {
    const replies = await d.$$('[data-testid=message][data-role=assistant]');
    if (replies.length <= before) return false;
    const r = replies[replies.length - 1];
    return (await r.attr('data-status')) === 'streaming' && (await (await r.$('[data-testid=message-body]')).text()).length > 20;
  }, 'the remote reply to stream', 60000, 50);
}

async function choose(value) {
  await d.find('[data-testid=backend]');
  await d.execute(`const s = document.querySelector('[data-testid=backend]'); s.value = ${JSON.stringify(value)}; s.dispatchEvent(new Event('change', { bubbles: true }));`);
  await new Promise((r) => setTimeout(r, 300));
}

describe('remote endpoints', () => {
  before(async () => {
    peerUrl = await startPeer();
    await h.startDriver();
    d = await h.openApp();
  });
  after(async () => {
    peer?.kill('SIGKILL');
    await h.stop();
  });

  let endpointId;

  it('refuses an endpoint that does not answer, and adds one that does with its key kept safe', async () => {
    const fill = async (url, k) => {
      await d.execute(`for (const [id, v] of ${JSON.stringify([['endpoint-name', 'Peer'], ['endpoint-url', url], ['endpoint-key', k]])}) {
        const el = document.querySelector('[data-testid=' + id + ']'); el.value = v; el.dispatchEvent(new Event('input', { bubbles: true })); }`);
      await (await d.find('[data-testid=endpoint-add]')).click();
    };
    await fill('http://127.0.0.1:9/v1', key);
    const err = await d.find('[data-testid=endpoint-error]');
    assert.match(await err.text(), /cannot reach/);
    await fill(peerUrl, 'wrong-key');
    await d.waitFor(async () => /401/.test(await (await d.find('[data-testid=endpoint-error]')).text()), 'the wrong key refused');
    await fill(peerUrl, key);
    const ep = await d.find('[data-testid=endpoint]');
    endpointId = Number(await ep.attr('data-id'));
    // No keychain on a test machine: kept for the session, never silently in the database.
    assert.match(await (await d.find('[data-testid=endpoint-key-storage]')).text(), /system keychain|until Hearth closes/);
  });

  it('chats with the endpoint model, and Stop ends its reply', async () => {
    await newChat(d);
    await setSetting(d, 'temperature', 0);
    await choose(`${endpointId}|SmolLM2-135M-Instruct.Q4_1`);
    assert.match(await (await d.find('[data-testid=remote-badge]')).text(), /remote · Peer/);
    await send(d, 'What is 2 + 2?');
    const stats = await waitForReply(d);
    assert.equal(await stats.attr('data-finish'), 'end_token');
    assert.ok(Number(await stats.attr('data-generated-tokens')) > 0);
    assert.match(await (await (await lastReply(d)).$('[data-testid=message-body]')).text(), /4/);

    await setSetting(d, 'maxNewTokens', 1500);
    await sendAndStream('Write a very long story about a lighthouse keeper.');
    await (await d.find('[data-testid=stop]')).click();
    const stopped = await waitForReply(d, 10000);
    assert.equal(await stopped.attr('data-finish'), 'cancelled');
    assert.equal(await (await lastReply(d)).attr('data-status'), 'interrupted');
    assert.ok((await (await (await lastReply(d)).$('[data-testid=message-body]')).text()).length > 20, 'the stopped reply keeps its text');
  });

  it('remembers the choice after a restart, and keeps a reply cut off by a dead server', async () => {
    await h.closeApp();
    d = await h.openApp();
    assert.equal(await (await d.find('[data-testid=backend]')).prop('value'), `${endpointId}|SmolLM2-135M-Instruct.Q4_1`);
    // The key was kept for the last session only where there is no keychain: enter it again.
    if (await d.$('[data-testid=endpoint] input[type=password]')) {
      await d.execute(`const el = document.querySelector('[data-testid=endpoint] input[type=password]'); el.value = ${JSON.stringify(key)}; el.dispatchEvent(new Event('input', { bubbles: true }));`);
      await (await d.find('[data-testid=endpoint] .row button')).click();
      await new Promise((r) => setTimeout(r, 300));
    }
    await sendAndStream('Write another very long story, about a baker.');
    peer.kill('SIGKILL');
    const cut = await waitForReply(d, 20000);
    assert.equal(await cut.attr('data-finish'), 'interrupted');
    assert.equal(await (await lastReply(d)).attr('data-status'), 'interrupted');
    assert.ok((await (await (await lastReply(d)).$('[data-testid=message-body]')).text()).length > 20, 'the partial reply stays');
  });
});
