// The "Local API server" switch: off by default; on, the app serves the
// OpenAI API on 127.0.0.1 with a key, sharing the model with a chat that
// streams meanwhile; it comes back on after a restart; off, it is gone.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Harness, lastReply, newChat, send, setSetting } from './harness.mjs';

const h = new Harness({ port: 4484 });
let d;
// A port of its own, away from other runs' and the usual 8080.
const port = 20000 + (process.pid % 20000);

async function field(testid) {
  return (await d.find(`[data-testid=${testid}]`)).prop('value');
}

function chat(url, key, body) {
  return fetch(`${url}/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: 'any', messages: [{ role: 'user', content: 'Say hi.' }], max_tokens: 8, temperature: 0, ...body }),
  });
}

describe('local API server', () => {
  before(async () => {
    await h.startDriver();
    d = await h.openApp();
  });
  after(async () => {
    await h.stop();
  });

  let url;
  let key;

  it('is off by default, and on serves the OpenAI API with a key beside a streaming chat', async () => {
    const enabled = await d.find('[data-testid=api-server-enabled]');
    assert.equal(await enabled.prop('checked'), false);
    assert.equal((await d.$$('[data-testid=api-server-url]')).length, 0);

    await d.execute(`const p = document.querySelector('[data-testid=api-server-port]'); p.value = '${port}'; p.dispatchEvent(new Event('change', { bubbles: true }));`);
    await new Promise((r) => setTimeout(r, 300));
    await enabled.click();
    await d.waitFor(async () => (await d.$$('[data-testid=api-server-url]')).length === 1, 'the server URL to show');
    url = await field('api-server-url');
    key = await field('api-server-key');
    assert.equal(url, `http://127.0.0.1:${port}/v1`);
    assert.match(key, /^hearth-[0-9a-f]{48}$/);

    const models = await (await fetch(`${url}/models`, { headers: { Authorization: `Bearer ${key}` } })).json();
    assert.match(models.data[0].id, /SmolLM2/);
    assert.equal((await chat(url, 'wrong', {})).status, 401);

    // A chat streams a long reply; an API request is answered meanwhile.
    await newChat(d);
    await setSetting(d, 'maxNewTokens', 1500);
    // A seed whose story runs to the limit on every ISA: still streaming when the API answers.
    await setSetting(d, 'seed', 3);
    await send(d, 'Write a very long story about a lighthouse keeper.');
    await d.waitFor(async () => (await (await lastReply(d)).attr('data-status')) === 'streaming', 'the chat to stream');
    const answer = await (await chat(url, key, {})).json();
    assert.ok(answer.choices[0].message.content.length > 0, JSON.stringify(answer));
    assert.equal(await (await lastReply(d)).attr('data-status'), 'streaming', 'the chat kept streaming while the API answered');
    await (await d.find('[data-testid=stop]')).click();
    // The panel lists that client's cache (it reads the server's state again every few seconds).
    await d.waitFor(async () => (await d.$$('[data-testid=api-server-cache]')).length === 1, "the client's cache in the panel");
    assert.match(await (await d.find('[data-testid=api-server-cache]')).text(), /^\d+ tokens · \d+\.\d MB · used \d+ s ago$/);
  });

  it('comes back on after a restart, and off it is gone', async () => {
    await h.closeApp();
    d = await h.openApp();
    await d.waitFor(async () => (await d.$$('[data-testid=api-server-url]')).length === 1, 'the server URL after a restart');
    assert.equal(await field('api-server-url'), url);
    assert.equal(await field('api-server-key'), key);
    assert.equal((await chat(url, key, {})).status, 200);

    await (await d.find('[data-testid=api-server-enabled]')).click();
    await d.waitFor(async () => (await d.$$('[data-testid=api-server-url]')).length === 0, 'the URL to go');
    await assert.rejects(fetch(`${url}/models`, { headers: { Authorization: `Bearer ${key}` } }));
  });
});
