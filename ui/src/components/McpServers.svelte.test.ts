// Settings' MCP servers: the add form sends a checked configuration, a
// refused import says why and adds nothing, and what a server says (its
// tool descriptions, its errors) is text, never markup.
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { flushSync, mount, unmount } from 'svelte';
import { afterEach, describe, expect, it } from 'vitest';
import { app } from '../lib/app.svelte';
import type { McpServerState } from '../lib/bindings/McpServerState';
import McpServers from './McpServers.svelte';

const time: McpServerState = {
  name: 'time',
  summary: 'uvx mcp-server-time',
  transport: { type: 'stdio', command: 'uvx', args: ['mcp-server-time'], env: {} },
  running: true,
  tools: [
    { name: 'get_current_time', description: '<img src=x onerror=alert(1)>Now', inputSchema: {}, problem: null },
    { name: 'broken', description: null, inputSchema: {}, problem: 'its input schema is not a JSON schema Hearth can use: x' },
  ],
  error: null,
};

const tick = () => new Promise((r) => setTimeout(r, 20));

function input(target: HTMLElement, id: string, value: string) {
  const el = target.querySelector<HTMLInputElement | HTMLTextAreaElement>(`[data-testid=${id}]`)!;
  el.value = value;
  el.dispatchEvent(new Event('input'));
}

describe('McpServers', () => {
  afterEach(() => clearMocks());

  it('adds a command server with its arguments and environment', async () => {
    const added: unknown[] = [];
    mockIPC((cmd, args) => {
      if (cmd === 'mcp_servers_add') {
        added.push((args as { config: unknown }).config);
        return [time];
      }
      throw new Error(`unexpected ${cmd}`);
    });
    app.mcp.servers = [];
    const target = document.createElement('div');
    document.body.append(target);
    const view = mount(McpServers, { target });
    flushSync();
    input(target, 'mcp-name', 'time');
    input(target, 'mcp-command', 'uvx');
    input(target, 'mcp-args', 'mcp-server-time\n\n --local-timezone=UTC \n');
    input(target, 'mcp-env', 'TZ=UTC\nEMPTY=');
    flushSync();
    target.querySelector<HTMLButtonElement>('[data-testid=mcp-add]')!.click();
    await tick();
    expect(added).toEqual([
      { name: 'time', transport: { type: 'stdio', command: 'uvx', args: ['mcp-server-time', '--local-timezone=UTC'], env: { TZ: 'UTC', EMPTY: '' } } },
    ]);
    flushSync();
    expect(target.querySelectorAll('[data-testid=mcp-server]').length).toBe(1);
    expect(target.querySelector('[data-testid=mcp-server-state]')!.textContent).toBe('running · 2 tools');
    // A description with markup is shown as its text; no element is made of it.
    const tool = target.querySelector('[data-testid=mcp-tool]')!;
    expect(tool.querySelector('img')).toBeNull();
    expect(tool.textContent).toContain('<img src=x onerror=alert(1)>Now');
    expect(target.querySelector('[data-testid=mcp-tool-problem]')!.textContent).toContain('not a JSON schema');
    unmount(view);
    target.remove();
  });

  it('a bad environment line or a refused import says why, and adds nothing', async () => {
    const calls: string[] = [];
    mockIPC((cmd) => {
      calls.push(cmd);
      if (cmd === 'mcp_servers_import') throw { kind: 'tool', message: 'server “b” has neither a command nor a URL' };
      throw new Error(`unexpected ${cmd}`);
    });
    app.mcp.servers = [time];
    const target = document.createElement('div');
    document.body.append(target);
    const view = mount(McpServers, { target });
    flushSync();
    input(target, 'mcp-name', 'x');
    input(target, 'mcp-command', 'x');
    input(target, 'mcp-env', 'no equals sign');
    flushSync();
    target.querySelector<HTMLButtonElement>('[data-testid=mcp-add]')!.click();
    await tick();
    flushSync();
    expect(target.querySelector('[data-testid=mcp-error]')!.textContent).toBe('Environment: line 1 is not NAME=value');
    expect(calls).toEqual([]);

    target.querySelector<HTMLButtonElement>('[data-testid=mcp-import-toggle]')!.click();
    flushSync();
    input(target, 'mcp-import-text', '{"mcpServers": {"a": {"command": "x"}, "b": {}}}');
    flushSync();
    target.querySelector<HTMLButtonElement>('[data-testid=mcp-import]')!.click();
    await tick();
    flushSync();
    expect(calls).toEqual(['mcp_servers_import']);
    expect(target.querySelector('[data-testid=mcp-error]')!.textContent).toBe('server “b” has neither a command nor a URL');
    expect(app.mcp.servers).toEqual([time]);
    unmount(view);
    target.remove();
  });
});
