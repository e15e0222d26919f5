// Export, import and back up from the sidebar: the dialogs' answers go to
// the shell's commands, and an import opens what it brought in.
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { flushSync, mount, unmount } from 'svelte';
import { afterEach, describe, expect, it } from 'vitest';
import { app } from '../lib/app.svelte';
import Sidebar from './Sidebar.svelte';

const settle = () => new Promise((r) => setTimeout(r, 20));

describe('Sidebar', () => {
  afterEach(() => clearMocks());

  it('exports a conversation in the format picked, named after its title', async () => {
    const calls: { cmd: string; args: Record<string, unknown> }[] = [];
    mockIPC((cmd, args) => {
      calls.push({ cmd, args: args as Record<string, unknown> });
      if (cmd === 'plugin:dialog|save') return '/home/u/chat.hearth';
      if (cmd === 'conversations_export') return null;
      throw new Error(`unexpected ${cmd}`);
    });
    app.conversations = [{ id: 3, title: 'Plans: Q3/Q4?', createdAt: 0, updatedAt: 0, modelPath: null }];
    const target = document.createElement('div');
    const view = mount(Sidebar, { target });
    flushSync();
    expect(target.querySelector('[data-testid=export-bundle]')).toBeNull();
    target.querySelector<HTMLButtonElement>('[data-testid=export-menu]')!.click();
    flushSync();
    expect([...target.querySelectorAll('[role=menuitem]')].map((b) => b.getAttribute('data-testid'))).toEqual(['export-markdown', 'export-json', 'export-bundle']);
    target.querySelector<HTMLButtonElement>('[data-testid=export-bundle]')!.click();
    await settle();
    const dialog = calls.find((c) => c.cmd === 'plugin:dialog|save')!.args.options as { defaultPath: string; filters: { extensions: string[] }[] };
    expect(dialog.defaultPath).toBe('Plans Q3 Q4.hearth');
    expect(dialog.filters[0].extensions).toEqual(['hearth']);
    expect(calls.find((c) => c.cmd === 'conversations_export')!.args).toEqual({ id: 3, format: 'bundle', path: '/home/u/chat.hearth' });
    expect(app.notice).toEqual({ kind: 'export', text: 'Exported to /home/u/chat.hearth' });
    flushSync();
    expect(target.querySelector('[data-testid=export-bundle]')).toBeNull();
    unmount(view);
  });

  it('imports the file picked and opens the conversation it brought', async () => {
    const calls: string[] = [];
    mockIPC((cmd, args) => {
      calls.push(cmd);
      const a = args as Record<string, unknown>;
      switch (cmd) {
        case 'plugin:dialog|open':
          expect((a.options as { filters: { extensions: string[] }[] }).filters[0].extensions).toEqual(['json', 'hearth']);
          return '/home/u/chat.hearth';
        case 'conversations_import':
          expect(a).toEqual({ path: '/home/u/chat.hearth' });
          return { conversationIds: [9], skippedDuplicates: 0, cache: 'skipped', cacheNote: 'made with another model' };
        case 'conversations_list':
          return [{ id: 9, title: 'From afar', createdAt: 0, updatedAt: 0 }];
        case 'conversations_cache_states':
        case 'conversations_thread':
          return [];
        case 'settings_get':
          return {};
        case 'conversations_backend':
          return { kind: 'local' };
        default:
          throw new Error(`unexpected ${cmd}`);
      }
    });
    const target = document.createElement('div');
    const view = mount(Sidebar, { target });
    flushSync();
    target.querySelector<HTMLButtonElement>('[data-testid=import-button]')!.click();
    await settle();
    flushSync();
    expect(app.activeId).toBe(9);
    expect(app.notice?.text).toBe('Imported 1 conversation — text imported; cache skipped: made with another model');
    expect([...target.querySelectorAll('[data-testid=conversation-title]')].map((t) => t.textContent)).toEqual(['From afar']);
    unmount(view);
  });

  it('backs everything up under a dated name', async () => {
    let options: { defaultPath: string } | null = null;
    let backedUp: unknown = null;
    mockIPC((cmd, args) => {
      const a = args as Record<string, unknown>;
      if (cmd === 'plugin:dialog|save') {
        options = a.options as { defaultPath: string };
        return '/home/u/backup.json';
      }
      if (cmd === 'conversations_backup') {
        backedUp = a;
        return 2;
      }
      throw new Error(`unexpected ${cmd}`);
    });
    const target = document.createElement('div');
    const view = mount(Sidebar, { target });
    flushSync();
    target.querySelector<HTMLButtonElement>('[data-testid=backup-button]')!.click();
    await settle();
    expect(options!.defaultPath).toMatch(/^hearth-backup-\d{4}-\d{2}-\d{2}\.json$/);
    expect(backedUp).toEqual({ path: '/home/u/backup.json' });
    expect(app.notice?.text).toBe('Backed up 2 conversations to /home/u/backup.json');
    unmount(view);
  });
});
