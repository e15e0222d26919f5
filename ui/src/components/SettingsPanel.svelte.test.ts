// The thinking switch shows only for a model whose template has one; the
// speculation settings (a draft model among them) are sent like the others,
// with their errors beside them.
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { flushSync, mount, unmount } from 'svelte';
import { afterEach, describe, expect, it } from 'vitest';
import { app } from '../lib/app.svelte';
import type { ConversationSettings } from '../lib/bindings/ConversationSettings';
import SettingsPanel from './SettingsPanel.svelte';

const settings: ConversationSettings = {
  systemPrompt: '', temperature: 0.7, topK: 40, topP: 0.95, minP: 0.05, repeatPenalty: 1, penaltyWindow: 64,
  maxNewTokens: 512, seed: null, stopStrings: [], contextLength: 0, overflow: 'stopAtLimit', thinking: true,
  reasoningEffort: 'medium', toolServers: [], toolUse: 'auto', speculation: 'auto', draftTokens: 8, draftModel: null,
};
const ready = { state: 'ready', path: '/q.gguf', name: 'Qwen3', architecture: 'qwen3', contextLength: 4096, device: 'cpu' } as const;

describe('SettingsPanel', () => {
  afterEach(() => clearMocks());

  it('offers "Think before answering" only where the template has a switch', async () => {
    const saved: ConversationSettings[] = [];
    mockIPC((cmd, args) => {
      if (cmd === 'settings_validate') return [];
      if (cmd === 'settings_set') {
        saved.push((args as { settings: ConversationSettings }).settings);
        return null;
      }
      throw new Error(`unexpected ${cmd}`);
    });
    app.activeId = 1;
    app.settings.show(1, settings);
    app.models.status = { ...ready, reasoning: null };
    const target = document.createElement('div');
    // A checkbox fires change only when it is in a document.
    document.body.append(target);
    const view = mount(SettingsPanel, { target });
    flushSync();
    expect(target.querySelector('[data-testid=setting-thinking]')).toBeNull();

    app.models.status = { ...ready, reasoning: { open: '<think>', close: '</think>', switch: null, openedByPrompt: true, answerStart: null, effort: null } };
    flushSync();
    expect(target.querySelector('[data-testid=setting-thinking]')).toBeNull();

    app.models.status = { ...ready, reasoning: { open: '<think>', close: '</think>', switch: 'enable_thinking', openedByPrompt: false, answerStart: null, effort: null } };
    flushSync();
    const box = target.querySelector<HTMLInputElement>('[data-testid=setting-thinking]')!;
    expect(box.checked).toBe(true);
    expect(box.closest('label')!.textContent).toContain('Think before answering');
    box.click();
    await new Promise((r) => setTimeout(r, 20));
    expect(app.error).toBeNull();
    expect(saved).toEqual([{ ...settings, thinking: false }]);
    expect(target.querySelector('[data-testid=setting-reasoningEffort]')).toBeNull();
    unmount(view);
    target.remove();
  });

  it('offers the reasoning effort where the template reads one (gpt-oss)', async () => {
    const saved: ConversationSettings[] = [];
    mockIPC((cmd, args) => {
      if (cmd === 'settings_validate') return [];
      if (cmd === 'settings_set') {
        saved.push((args as { settings: ConversationSettings }).settings);
        return null;
      }
      throw new Error(`unexpected ${cmd}`);
    });
    app.activeId = 1;
    app.settings.show(1, settings);
    app.models.status = {
      ...ready,
      reasoning: {
        open: '<|channel|>analysis<|message|>', close: '<|end|>', switch: null, openedByPrompt: false,
        answerStart: '<|channel|>final<|message|>', effort: 'reasoning_effort',
      },
    };
    const target = document.createElement('div');
    document.body.append(target);
    const view = mount(SettingsPanel, { target });
    flushSync();
    // Harmony has no on/off switch; it has an effort.
    expect(target.querySelector('[data-testid=setting-thinking]')).toBeNull();
    const select = target.querySelector<HTMLSelectElement>('[data-testid=setting-reasoningEffort]')!;
    expect(select.value).toBe('medium');
    select.value = 'high';
    select.dispatchEvent(new Event('change', { bubbles: true }));
    await new Promise((r) => setTimeout(r, 20));
    expect(app.error).toBeNull();
    expect(saved).toEqual([{ ...settings, reasoningEffort: 'high' }]);
    unmount(view);
    target.remove();
  });

  it('shows the speculation mode and draft tokens, and sends changes like the other settings', async () => {
    const saved: ConversationSettings[] = [];
    mockIPC((cmd, args) => {
      if (cmd === 'settings_validate') return [];
      if (cmd === 'settings_set') {
        saved.push((args as { settings: ConversationSettings }).settings);
        return null;
      }
      throw new Error(`unexpected ${cmd}`);
    });
    app.activeId = 1;
    app.settings.show(1, settings);
    app.models.status = { ...ready, reasoning: null };
    const target = document.createElement('div');
    document.body.append(target);
    const view = mount(SettingsPanel, { target });
    flushSync();
    const select = target.querySelector<HTMLSelectElement>('[data-testid=setting-speculation]')!;
    expect(select.value).toBe('auto');
    expect([...select.options].map((o) => [o.value, o.textContent])).toEqual([
      ['off', 'Off'], ['auto', 'Auto (backs off when drafts miss)'], ['ngram', 'Always draft (n-gram)'], ['draft', 'Draft model'],
      ['mtp', 'MTP head (Qwen 3.5/3.6, GLM files)'],
    ]);
    expect(select.closest('label')!.textContent).toContain('Speculative decoding');
    expect(target.querySelector('[data-testid=speculation-help]')!.textContent).toContain('the reply is the same, only faster');
    const draft = target.querySelector<HTMLInputElement>('[data-testid=setting-draftTokens]')!;
    expect(draft.value).toBe('8');
    expect(draft.title).toBe('Most drafted tokens checked per step.');
    // The draft model is asked for only when drafting with one.
    expect(target.querySelector('[data-testid=setting-draftModel]')).toBeNull();

    select.value = 'ngram';
    select.dispatchEvent(new Event('change', { bubbles: true }));
    await new Promise((r) => setTimeout(r, 20));
    expect(app.error).toBeNull();
    expect(saved).toEqual([{ ...settings, speculation: 'ngram' }]);

    draft.value = '16';
    draft.dispatchEvent(new Event('input', { bubbles: true }));
    await new Promise((r) => setTimeout(r, 20));
    expect(saved[saved.length - 1]).toEqual({ ...settings, speculation: 'ngram', draftTokens: 16 });

    select.value = 'off';
    select.dispatchEvent(new Event('change', { bubbles: true }));
    await new Promise((r) => setTimeout(r, 20));
    expect(saved[saved.length - 1]).toEqual({ ...settings, speculation: 'off', draftTokens: 16 });
    unmount(view);
    target.remove();
  });

  it('drafts with a model from the library, with its error beside it', async () => {
    const saved: ConversationSettings[] = [];
    let libraryReads = 0;
    const library = [
      { path: '/models/qwen3-0.6b.gguf', name: 'Qwen3 0.6B' },
      { path: '/models/qwen3-8b.gguf', name: 'Qwen3 8B' },
    ].map((m) => ({ ...m, sizeBytes: 1, lastOpenedAt: 0, exists: true, source: null, facts: null, error: null }));
    mockIPC((cmd, args) => {
      if (cmd === 'models_library') {
        libraryReads++;
        return library;
      }
      const s = (args as { settings: ConversationSettings }).settings;
      if (cmd === 'settings_validate') {
        return s.speculation === 'draft' && !s.draftModel
          ? [{ field: 'draftModel', message: 'must be the path of a model file when drafting with a draft model' }]
          : [];
      }
      if (cmd === 'settings_set') {
        saved.push(s);
        return null;
      }
      throw new Error(`unexpected ${cmd}`);
    });
    app.activeId = 1;
    app.settings.show(1, settings);
    app.models.status = { ...ready, reasoning: null };
    app.models.library = null;
    const target = document.createElement('div');
    document.body.append(target);
    const view = mount(SettingsPanel, { target });
    flushSync();
    const model = () => target.querySelector<HTMLSelectElement>('[data-testid=setting-draftModel]');
    const error = () => target.querySelector('[data-testid=error-draftModel]')?.textContent ?? null;
    expect(model()).toBeNull();
    expect(libraryReads).toBe(0);

    const select = target.querySelector<HTMLSelectElement>('[data-testid=setting-speculation]')!;
    select.value = 'draft';
    select.dispatchEvent(new Event('change', { bubbles: true }));
    await new Promise((r) => setTimeout(r, 20));
    flushSync();
    expect(app.error).toBeNull();
    expect(libraryReads).toBe(1);
    expect(model()!.closest('label')!.textContent).toContain('Draft model');
    expect([...model()!.options].map((o) => [o.value, o.textContent])).toEqual([
      ['', 'Choose a model…'], ['/models/qwen3-0.6b.gguf', 'Qwen3 0.6B'], ['/models/qwen3-8b.gguf', 'Qwen3 8B'],
    ]);
    expect(model()!.value).toBe('');
    // No model yet: refused, with the reason beside the field.
    expect(error()).toBe('Draft model must be the path of a model file when drafting with a draft model');
    expect(model()!.closest('label')!.classList.contains('invalid')).toBe(true);
    expect(saved).toEqual([]);

    model()!.value = '/models/qwen3-0.6b.gguf';
    model()!.dispatchEvent(new Event('change', { bubbles: true }));
    await new Promise((r) => setTimeout(r, 20));
    flushSync();
    expect(error()).toBeNull();
    expect(model()!.closest('label')!.classList.contains('invalid')).toBe(false);
    expect(saved).toEqual([{ ...settings, speculation: 'draft', draftModel: '/models/qwen3-0.6b.gguf' }]);

    // Back to "Choose a model…": no model again.
    model()!.value = '';
    model()!.dispatchEvent(new Event('change', { bubbles: true }));
    await new Promise((r) => setTimeout(r, 20));
    flushSync();
    expect(app.activeSettings?.draftModel).toBeNull();
    expect(error()).toBe('Draft model must be the path of a model file when drafting with a draft model');
    expect(saved).toHaveLength(1);
    unmount(view);
    target.remove();
  });

  it('keeps a draft model that is no longer in the library', () => {
    mockIPC((cmd) => {
      if (cmd === 'models_library') return [];
      throw new Error(`unexpected ${cmd}`);
    });
    app.activeId = 1;
    app.settings.show(1, { ...settings, speculation: 'draft', draftModel: '/gone/tiny-draft.gguf' });
    app.models.status = { ...ready, reasoning: null };
    app.models.library = [];
    const target = document.createElement('div');
    document.body.append(target);
    const view = mount(SettingsPanel, { target });
    flushSync();
    const model = target.querySelector<HTMLSelectElement>('[data-testid=setting-draftModel]')!;
    expect([...model.options].map((o) => [o.value, o.textContent])).toEqual([['', 'Choose a model…'], ['/gone/tiny-draft.gguf', 'tiny-draft']]);
    expect(model.value).toBe('/gone/tiny-draft.gguf');
    unmount(view);
    target.remove();
  });

  it('shows an out-of-range draft tokens error beside its field, and saves nothing', async () => {
    const saved: ConversationSettings[] = [];
    let validated = 0;
    mockIPC((cmd, args) => {
      const s = (args as { settings: ConversationSettings }).settings;
      if (cmd === 'settings_validate') {
        validated++;
        return s.draftTokens >= 1 && s.draftTokens <= 32 ? [] : [{ field: 'draftTokens', message: 'must be a whole number between 1 and 32' }];
      }
      if (cmd === 'settings_set') {
        saved.push(s);
        return null;
      }
      throw new Error(`unexpected ${cmd}`);
    });
    app.activeId = 1;
    app.settings.show(1, settings);
    app.models.status = { ...ready, reasoning: null };
    const target = document.createElement('div');
    document.body.append(target);
    const view = mount(SettingsPanel, { target });
    flushSync();
    const draft = target.querySelector<HTMLInputElement>('[data-testid=setting-draftTokens]')!;
    const error = () => target.querySelector('[data-testid=error-draftTokens]')?.textContent ?? null;
    expect(error()).toBeNull();

    draft.value = '40';
    draft.dispatchEvent(new Event('input', { bubbles: true }));
    await new Promise((r) => setTimeout(r, 20));
    flushSync();
    expect(error()).toBe('Draft tokens must be a whole number between 1 and 32');
    expect(draft.closest('label')!.classList.contains('invalid')).toBe(true);
    // The text typed stays as typed.
    expect(draft.value).toBe('40');
    expect(saved).toEqual([]);

    // Not a whole number: refused here, before the backend sees it.
    draft.value = '2.5';
    draft.dispatchEvent(new Event('input', { bubbles: true }));
    await new Promise((r) => setTimeout(r, 20));
    flushSync();
    expect(validated).toBe(1);
    expect(error()).toBe('Draft tokens must be a whole number, 0 or more');

    draft.value = '4';
    draft.dispatchEvent(new Event('input', { bubbles: true }));
    await new Promise((r) => setTimeout(r, 20));
    flushSync();
    expect(error()).toBeNull();
    expect(draft.closest('label')!.classList.contains('invalid')).toBe(false);
    expect(saved).toEqual([{ ...settings, draftTokens: 4 }]);
    unmount(view);
    target.remove();
  });
});
