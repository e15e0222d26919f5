// The Models view (each model's header facts, Open, Remove with its
// confirmation) and the notice that offers a conversation its own model.
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { flushSync, mount, unmount } from 'svelte';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { app } from '../lib/app.svelte';
import { library } from '../lib/models.fixtures';
import ModelMismatch from './ModelMismatch.svelte';
import ModelsView from './ModelsView.svelte';

const settle = () => new Promise((r) => setTimeout(r, 20));
const ready = (path: string, name: string) => ({ state: 'ready' as const, path, name, architecture: 'llama', contextLength: 8192, device: 'cpu', reasoning: null });

function fakeShell() {
  const calls: { cmd: string; args: Record<string, unknown> }[] = [];
  let models = structuredClone(library);
  mockIPC((cmd, args) => {
    const a = args as Record<string, unknown>;
    calls.push({ cmd, args: a });
    switch (cmd) {
      case 'models_library':
        return models;
      case 'models_forget':
        models = models.filter((m) => m.path !== a.path);
        return null;
      case 'models_open':
      case 'models_recent':
        return cmd === 'models_recent' ? [] : null;
      default:
        throw new Error(`unexpected ${cmd}`);
    }
  });
  return calls;
}

describe('ModelsView', () => {
  beforeEach(() => {
    app.models.status = ready('/m/smol.gguf', 'smol');
    app.models.library = null;
    app.activeId = null;
    app.error = null;
  });
  afterEach(() => clearMocks());

  it('lists each model with its header facts, and an error for a file it cannot read', async () => {
    fakeShell();
    const target = document.createElement('div');
    const view = mount(ModelsView, { target });
    await app.models.showLibrary();
    flushSync();
    expect(target.querySelector('[data-testid=models-view]')).not.toBeNull();
    const rows = [...target.querySelectorAll<HTMLElement>('[data-testid=model-row]')];
    expect(rows.map((r) => r.dataset.path)).toEqual(['/m/smol.gguf', '/m/cut.gguf', '/m/gone.gguf']);
    const text = (id: string) => rows[0].querySelector(`[data-testid=${id}]`)!.textContent;
    expect(text('model-arch')).toBe('llama');
    expect(text('model-params')).toBe('135M');
    expect(text('model-quants')).toBe('Q4_1 69% · Q8_0 31% · F32 <1%');
    expect(text('model-context')).toBe('8,192 tokens');
    expect(text('model-size')).toBe('98.4 MB');
    expect(text('model-memory')).toBe('≈ 0.3 GB at 8,192 tokens');
    // The loaded model cannot be opened again; a missing one cannot be opened.
    expect(rows[0].querySelector<HTMLButtonElement>('[data-testid=model-open]')!.disabled).toBe(true);
    expect(rows[1].querySelector('[data-testid=model-error]')!.textContent).toContain('truncated');
    expect(rows[2].querySelector('[data-testid=model-error]')!.textContent).toBe('The file is no longer there.');
    expect(rows[2].querySelector<HTMLButtonElement>('[data-testid=model-open]')!.disabled).toBe(true);
    unmount(view);
  });

  it("estimates memory at the open conversation's context", async () => {
    fakeShell();
    app.activeId = 5;
    app.settings.byConversation[5] = { ...(app.settings.byConversation[5] ?? {}), contextLength: 2048 } as never;
    const target = document.createElement('div');
    const view = mount(ModelsView, { target });
    await app.models.loadLibrary();
    flushSync();
    expect(target.querySelector('[data-testid=model-memory]')!.textContent).toBe('≈ 0.1 GB at 2,048 tokens');
    unmount(view);
  });

  it('opens a model through the store', async () => {
    const calls = fakeShell();
    app.models.status = ready('/m/other.gguf', 'other');
    const target = document.createElement('div');
    const view = mount(ModelsView, { target });
    await app.models.loadLibrary();
    flushSync();
    target.querySelector<HTMLButtonElement>('[data-path="/m/smol.gguf"] [data-testid=model-open]')!.click();
    await settle();
    expect(calls.filter((c) => c.cmd === 'models_open').map((c) => c.args)).toEqual([{ path: '/m/smol.gguf' }]);
    unmount(view);
  });

  it('removes from the list after a confirmation, deleting the file only when ticked', async () => {
    const calls = fakeShell();
    app.models.status = ready('/m/other.gguf', 'other');
    // Connected: a checkbox's click changes it only in the document.
    const target = document.body.appendChild(document.createElement('div'));
    const view = mount(ModelsView, { target });
    await app.models.loadLibrary();
    flushSync();
    const row = (path: string) => target.querySelector<HTMLElement>(`[data-path="${path}"]`);
    row('/m/cut.gguf')!.querySelector<HTMLButtonElement>('[data-testid=model-remove]')!.click();
    flushSync();
    const box = row('/m/cut.gguf')!.querySelector<HTMLInputElement>('[data-testid=model-delete-file]')!;
    expect(box.checked).toBe(false);
    // Cancel changes nothing.
    [...row('/m/cut.gguf')!.querySelectorAll('button')].find((b) => b.textContent === 'Cancel')!.click();
    flushSync();
    expect(row('/m/cut.gguf')!.querySelector('[data-testid=model-remove-confirm]')).toBeNull();
    expect(calls.some((c) => c.cmd === 'models_forget')).toBe(false);
    // Unticked: only from the list.
    row('/m/cut.gguf')!.querySelector<HTMLButtonElement>('[data-testid=model-remove]')!.click();
    flushSync();
    row('/m/cut.gguf')!.querySelector<HTMLButtonElement>('[data-testid=model-remove-confirm-button]')!.click();
    await settle();
    flushSync();
    expect(row('/m/cut.gguf')).toBeNull();
    // Ticked: the file too.
    row('/m/smol.gguf')!.querySelector<HTMLButtonElement>('[data-testid=model-remove]')!.click();
    flushSync();
    const tick = row('/m/smol.gguf')!.querySelector<HTMLInputElement>('[data-testid=model-delete-file]')!;
    tick.click();
    flushSync();
    const confirm = row('/m/smol.gguf')!.querySelector<HTMLButtonElement>('[data-testid=model-remove-confirm-button]')!;
    expect(confirm.textContent!.trim()).toBe('Remove and delete');
    confirm.click();
    await settle();
    flushSync();
    expect(calls.filter((c) => c.cmd === 'models_forget').map((c) => c.args)).toEqual([
      { path: '/m/cut.gguf', deleteFile: false },
      { path: '/m/smol.gguf', deleteFile: true },
    ]);
    expect([...target.querySelectorAll<HTMLElement>('[data-testid=model-row]')].map((r) => r.dataset.path)).toEqual(['/m/gone.gguf']);
    unmount(view);
    target.remove();
  });

  it('never offers to delete the loaded model', async () => {
    fakeShell();
    const target = document.createElement('div');
    const view = mount(ModelsView, { target });
    await app.models.loadLibrary();
    flushSync();
    target.querySelector<HTMLButtonElement>('[data-path="/m/smol.gguf"] [data-testid=model-remove]')!.click();
    flushSync();
    expect(target.querySelector<HTMLInputElement>('[data-path="/m/smol.gguf"] [data-testid=model-delete-file]')!.disabled).toBe(true);
    unmount(view);
  });
});

describe('ModelMismatch', () => {
  afterEach(() => clearMocks());

  it("offers to switch to the conversation's model, or to go on with the loaded one", async () => {
    const calls = fakeShell();
    app.models.status = ready('/m/smol.gguf', 'smol');
    app.models.recent = [{ path: '/m/qwen.gguf', name: 'Qwen3', sizeBytes: 1, lastOpenedAt: 1, source: null }];
    app.conversations = [
      { id: 1, title: 'Old', createdAt: 0, updatedAt: 0, modelPath: '/m/qwen.gguf' },
      { id: 2, title: 'Same', createdAt: 0, updatedAt: 0, modelPath: '/m/smol.gguf' },
    ];
    app.activeId = 2;
    const target = document.createElement('div');
    const view = mount(ModelMismatch, { target });
    flushSync();
    expect(target.querySelector('[data-testid=model-mismatch]')).toBeNull();
    app.activeId = 1;
    flushSync();
    const notice = target.querySelector<HTMLElement>('[data-testid=model-mismatch]')!;
    expect(notice.dataset.path).toBe('/m/qwen.gguf');
    const switchTo = notice.querySelector<HTMLButtonElement>('[data-testid=model-mismatch-switch]')!;
    const goOn = notice.querySelector<HTMLButtonElement>('[data-testid=model-mismatch-continue]')!;
    expect(switchTo.textContent).toBe('Switch to Qwen3');
    expect(goOn.textContent).toBe('Continue with smol');
    switchTo.click();
    await settle();
    expect(calls.filter((c) => c.cmd === 'models_open').map((c) => c.args)).toEqual([{ path: '/m/qwen.gguf' }]);
    goOn.click();
    flushSync();
    expect(target.querySelector('[data-testid=model-mismatch]')).toBeNull();
    unmount(view);
  });
});
