// MCP servers in the app: added in Settings from an mcpServers file (the
// real `mcp-server-time` from PyPI and `server-everything` from npm, and a
// scripted server that misbehaves), chosen per chat; the model's call asks
// for approval, runs, and its result feeds the next reply. A denied call, a
// hanging server stopped with Stop, a server that dies mid-call, a result
// with HTML shown as text, bad files and commands, a chat whose server cannot
// start, and the conversation exported and imported with its calls.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Harness, activeConversationId, newChat, send } from './harness.mjs';

const h = new Harness({ port: 4574 });
const mcpDir = process.env.HEARTH_MCP_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'hearth', 'mcp');
const scripted = join(import.meta.dirname, '../../crates/mcp/tests/data/scripted_server.py');
const files = mkdtempSync(join(tmpdir(), 'hearth-mcp-e2e-'));
let d;

async function invoke(cmd, args) {
  const out = JSON.parse(await d.executeAsync(
    'const [cmd, args, cb] = arguments; window.__TAURI_INTERNALS__.invoke(cmd, args).then((r) => cb(JSON.stringify({ ok: r ?? null })), (e) => cb(JSON.stringify({ error: e })));',
    [cmd, args],
  ));
  if (out.error) throw new Error(JSON.stringify(out.error));
  return out.ok;
}

async function setValue(testid, value) {
  await d.execute(`const el = document.querySelector('[data-testid=${testid}]'); el.value = ${JSON.stringify(value)};
    el.dispatchEvent(new Event('input', { bubbles: true })); el.dispatchEvent(new Event('change', { bubbles: true }));`);
}

/** Pastes an mcpServers file into Settings and imports it. */
async function importServers(json) {
  // Clicked from script: the settings panel may have scrolled it out of reach.
  if (!(await d.$('[data-testid=mcp-import-text]'))) await d.execute('document.querySelector("[data-testid=mcp-import-toggle]").click()');
  await d.find('[data-testid=mcp-import-text]');
  await setValue('mcp-import-text', json);
  await d.execute('document.querySelector("[data-testid=mcp-import]").click()');
}

/** A new chat offered `server`'s tools, its model made to call one. */
async function chatWith(server) {
  await newChat(d);
  const id = await activeConversationId(d);
  await d.find(`[data-testid=setting-tool-server][data-name="${server}"]`);
  await d.execute(`document.querySelector('[data-testid=setting-tool-server][data-name="${server}"]').click()`);
  await setValue('setting-toolUse', 'always');
  await setValue('setting-temperature', '0');
  await d.waitFor(async () => {
    const s = await invoke('settings_get', { conversationId: id });
    return s.toolServers.includes(server) && s.toolUse === 'always' && s.temperature === 0;
  }, `the chat to use ${server}`, 30000);
  return id;
}

const calls = () => d.$$('[data-testid=tool-call]');
async function lastCall() {
  const all = await calls();
  return all[all.length - 1] ?? null;
}

/** Waits for the last call to reach one of `statuses` (or, for
 *  `awaiting`, any call to ask); returns it. */
async function callIn(statuses, what, timeoutMs = 60000) {
  return d.waitFor(async () => {
    if (statuses.includes('awaiting')) {
      const asking = await d.$('[data-testid=tool-call][data-status=awaiting]');
      if (asking) return asking;
    }
    const c = await lastCall();
    return c && statuses.includes(await c.attr('data-status')) ? c : null;
  }, what, timeoutMs);
}

/** Waits until the chat is idle again: nothing streaming, no call pending. */
async function idle(id) {
  await d.waitFor(async () => !(await invoke('chat_busy', {})).includes(id), 'the chat to be idle', 120000);
}

describe('MCP servers and tool calls', () => {
  before(async () => {
    await h.startDriver();
    d = await h.openApp();
  });
  after(async () => {
    await h.stop();
    rmSync(files, { recursive: true, force: true });
  });

  it('a malformed file, or a server command that does not exist, says so and changes nothing', async () => {
    await importServers('{"mcpServers": {"time": {"command": "x"}, "broken": {"args": ["y"]}}}');
    const err = await d.find('[data-testid=mcp-error]');
    assert.equal(await err.text(), 'server “broken” has neither a command nor a URL');
    assert.equal((await d.$$('[data-testid=mcp-server]')).length, 0);

    await importServers(JSON.stringify({ mcpServers: { missing: { command: 'hearth-no-such-command' } } }));
    await (await d.find('[data-testid=mcp-server][data-name="missing"] [data-testid=mcp-server-connect]')).click();
    await d.waitFor(async () => /was not found/.test(await (await d.find('[data-testid=mcp-error]')).text()), 'the missing command named');
    await (await d.find('[data-testid=mcp-server][data-name="missing"] [data-testid=mcp-server-remove]')).click();
    await d.waitFor(async () => (await d.$$('[data-testid=mcp-server]')).length === 0, 'the server removed');
  });

  it('adds real servers from an mcpServers file and lists their tools', async () => {
    const servers = {
      mcpServers: {
        time: { command: join(mcpDir, 'venv/bin/mcp-server-time'), args: ['--local-timezone=UTC'] },
        everything: { command: join(mcpDir, 'npm/node_modules/.bin/mcp-server-everything') },
        hang: { command: 'python3', args: [scripted, '--only', 'hang'] },
        die: { command: 'python3', args: [scripted, '--only', 'die'] },
        html: { command: 'python3', args: [scripted, '--only', 'html'] },
      },
    };
    await importServers(JSON.stringify(servers));
    await d.waitFor(async () => (await d.$$('[data-testid=mcp-server]')).length === 5, 'five servers');
    for (const name of ['time', 'everything']) {
      await (await d.find(`[data-testid=mcp-server][data-name="${name}"] [data-testid=mcp-server-connect]`)).click();
      await d.waitFor(async () => /running · \d+ tools/.test(await (await d.find(`[data-testid=mcp-server][data-name="${name}"] [data-testid=mcp-server-state]`)).text()), `${name} running`, 60000);
    }
    assert.ok(await d.$('[data-testid=mcp-server][data-name="time"] [data-testid=mcp-tool][data-name="get_current_time"]'));
    assert.ok(await d.$('[data-testid=mcp-server][data-name="everything"] [data-testid=mcp-tool][data-name="echo"]'));
  });

  let timeChat;
  it('a call asks first, runs once allowed, and its result feeds the next reply', async () => {
    timeChat = await chatWith('time');
    await send(d, 'What time is it in Paris?');
    const asking = await callIn(['awaiting'], 'the call to ask for approval');
    assert.match(await (await asking.$('[data-testid=tool-call-arguments]')).text(), /timezone/);
    await (await asking.$('[data-testid=tool-allow-once]')).click();
    // `ok`, or the tool's own error for a timezone the small model made up.
    const done = await callIn(['ok', 'error'], 'the call to run');
    assert.match(await (await done.$('[data-testid=tool-call-state]')).text(), /done|error/);
    await idle(timeChat);
    const thread = await invoke('conversations_thread', { id: timeChat });
    const [, calling, answer] = thread;
    assert.equal(calling.toolCalls.length, 1);
    assert.equal(calling.toolCalls[0].server, 'time');
    assert.ok(calling.toolCalls[0].result.length > 0);
    assert.equal(answer.message.parentId, calling.message.id, 'the next reply reads the result');
    assert.equal(answer.message.status, 'complete');
  });

  it('a denied call goes back to the model as a denial', async () => {
    const before = (await calls()).length;
    await send(d, 'And in Tokyo?');
    await d.waitFor(async () => (await calls()).length > before, 'the second call');
    await (await (await callIn(['awaiting'], 'the second call to ask')).$('[data-testid=tool-deny]')).click();
    await callIn(['denied'], 'the call denied');
    await idle(timeChat);
    const thread = await invoke('conversations_thread', { id: timeChat });
    assert.equal(thread[thread.length - 2].toolCalls[0].status, 'denied');
    assert.equal(thread[thread.length - 1].message.status, 'complete');
  });

  it('Stop ends a call to a server that hangs', async () => {
    const id = await chatWith('hang');
    await send(d, 'Wait for me.');
    await (await (await callIn(['awaiting'], 'the hang call to ask')).$('[data-testid=tool-allow-once]')).click();
    await callIn(['pending'], 'the hang call to run');
    await new Promise((r) => setTimeout(r, 500));
    await (await d.find('[data-testid=stop]')).click();
    await callIn(['stopped'], 'the call stopped', 10000);
    await idle(id);
  });

  it('a server that dies mid-call costs that call only', async () => {
    const id = await chatWith('die');
    await send(d, 'Break, please.');
    await (await (await callIn(['awaiting'], 'the die call to ask')).$('[data-testid=tool-allow-always]')).click();
    const failed = await callIn(['failed'], 'the call to fail');
    assert.match(await (await failed.$('[data-testid=tool-call-result]')).text(), /stopped during the call.*fatal: the tool broke/);
    await idle(id);
    const thread = await invoke('conversations_thread', { id });
    assert.equal(thread[thread.length - 1].message.status, 'complete', 'the model still answers');
    // Allowed for good in this chat: the next call runs without asking (on a server started again).
    const before = (await calls()).length;
    await send(d, 'Once more.');
    await d.waitFor(async () => (await calls()).length > before && (await (await lastCall()).attr('data-status')) === 'failed', 'the second call to run unasked', 60000);
    await idle(id);
  });

  it('a result with HTML is shown as text', async () => {
    const id = await chatWith('html');
    await send(d, 'Show me something.');
    await (await (await callIn(['awaiting'], 'the html call to ask')).$('[data-testid=tool-allow-once]')).click();
    const done = await callIn(['ok'], 'the html call to run');
    await idle(id);
    const result = await (await done.$('[data-testid=tool-call-result]')).text();
    assert.equal(result, '<script>alert(1)</script><b>bold</b>');
    assert.equal(await d.execute('return document.querySelectorAll("[data-testid=tool-calls] script, [data-testid=tool-calls] b").length'), 0);
  });

  it('a chat whose server cannot start says so, and answers without its tools', async () => {
    await importServers(JSON.stringify({ mcpServers: { broken: { command: 'hearth-no-such-command' } } }));
    await d.waitFor(async () => (await d.$$('[data-testid=mcp-server]')).length === 6, 'six servers');
    const id = await chatWith('broken');
    const dismiss = 'document.querySelector("[data-testid=tool-notice] button")?.click()';
    await d.execute(dismiss);
    await send(d, 'Hello there.');
    const toast = await d.find('[data-testid=tool-notice]', 60000);
    assert.match(await toast.text(), /Tools left out of this reply: server “broken”: the command “hearth-no-such-command” was not found/);
    await idle(id);
    const thread = await invoke('conversations_thread', { id });
    const reply = thread[thread.length - 1];
    assert.equal(reply.message.status, 'complete');
    assert.equal(reply.toolCalls.length, 0);
    await d.execute(dismiss);
  });

  it('exports and imports the conversation with its calls', async () => {
    const path = join(files, 'time.json');
    await invoke('conversations_export', { id: timeChat, format: 'json', path });
    // Renamed, so the database does not skip it as the conversation it holds.
    const copyPath = join(files, 'copy.json');
    writeFileSync(copyPath, JSON.stringify({ ...JSON.parse(readFileSync(path, 'utf8')), title: 'A copy' }));
    const result = await invoke('conversations_import', { path: copyPath });
    assert.equal(result.conversationIds.length, 1);
    const id = result.conversationIds[0];
    const original = await invoke('conversations_thread', { id: timeChat });
    const copy = await invoke('conversations_thread', { id });
    assert.deepEqual(copy.map((t) => t.toolCalls), original.map((t) => t.toolCalls));
    assert.ok(copy.some((t) => t.toolCalls.length > 0));
  });
});
