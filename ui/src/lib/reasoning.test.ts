import { describe, expect, it } from 'vitest';
import type { ReasoningFormat } from './bindings/ReasoningFormat';
import { splitThinking, ThinkingCounter } from './reasoning';

const tags = { answerStart: null, effort: null };
const qwen3: ReasoningFormat = { open: '<think>', close: '</think>', switch: 'enable_thinking', openedByPrompt: false, ...tags };
const r1: ReasoningFormat = { open: '<think>', close: '</think>', switch: null, openedByPrompt: true, ...tags };
const other: ReasoningFormat = { open: '<|begin_of_thought|>', close: '<|end_of_thought|>', switch: null, openedByPrompt: false, ...tags };
// gpt-oss's Harmony, as the engine reads it from the template.
const harmony: ReasoningFormat = {
  open: '<|channel|>analysis<|message|>', close: '<|end|>', switch: null, openedByPrompt: false,
  answerStart: '<|channel|>final<|message|>', effort: 'reasoning_effort',
};

describe('splitThinking on Harmony (gpt-oss)', () => {
  const reply = '<|channel|>analysis<|message|>User asks 2+2. Simple.<|end|><|start|>assistant<|channel|>final<|message|>It is **4**.';

  it('takes the analysis as thinking and the final message as the answer', () => {
    expect(splitThinking(reply, harmony, false)).toEqual({ thinking: 'User asks 2+2. Simple.', closed: true, answer: 'It is **4**.' });
    const two = '<|channel|>analysis<|message|>One.<|end|><|start|>assistant<|channel|>analysis<|message|>Two.<|end|>'
      + '<|start|>assistant<|channel|>final<|message|>Done.<|end|>';
    expect(splitThinking(two, harmony, false)).toEqual({ thinking: 'One.\n\nTwo.', closed: true, answer: 'Done.' });
    expect(splitThinking('<|channel|>final<|message|>Hi', harmony, false)).toEqual({ thinking: null, closed: true, answer: 'Hi' });
    expect(splitThinking('Typed by hand.', harmony, false)).toEqual({ thinking: null, closed: false, answer: 'Typed by hand.' });
  });

  it('streams without showing markup, at every length of the reply', () => {
    for (let n = 0; n <= reply.length; n++) {
      const s = splitThinking(reply.slice(0, n), harmony, true);
      for (const part of [s.thinking ?? '', s.answer]) {
        expect(part).not.toMatch(/<\|/);
      }
      expect('User asks 2+2. Simple.'.startsWith(s.thinking ?? '')).toBe(true);
      expect('It is **4**.'.startsWith(s.answer)).toBe(true);
    }
    expect(splitThinking('<|channel|>analysis<|message|>Hmm, the us', harmony, true))
      .toEqual({ thinking: 'Hmm, the us', closed: false, answer: '' });
    expect(splitThinking('<|channel|>analysis<|message|>Hmm.<|end|><|start|>assi', harmony, true))
      .toEqual({ thinking: 'Hmm.', closed: true, answer: '' });
  });
});

describe('splitThinking', () => {
  it('takes the thinking from a reply that opens with the tag', () => {
    expect(splitThinking('<think>\nLet me add.\n2+2=4\n</think>\n\nIt is **4**.', qwen3, false))
      .toEqual({ thinking: 'Let me add.\n2+2=4', closed: true, answer: 'It is **4**.' });
    expect(splitThinking('\n  <think>x</think>y', null, false)).toEqual({ thinking: 'x', closed: true, answer: 'y' });
  });

  it('streams the thinking until the close tag arrives', () => {
    expect(splitThinking('<think>\nHmm, the user', qwen3, true)).toEqual({ thinking: 'Hmm, the user', closed: false, answer: '' });
    expect(splitThinking('<think>\nHmm</th', qwen3, true)).toEqual({ thinking: 'Hmm', closed: false, answer: '' });
    expect(splitThinking('<think>\nHmm</think>\n\nThe ans', qwen3, true)).toEqual({ thinking: 'Hmm', closed: true, answer: 'The ans' });
    // A tag still arriving is not shown as text.
    expect(splitThinking('\n<thi', qwen3, true)).toEqual({ thinking: null, closed: false, answer: '' });
    expect(splitThinking('<', qwen3, true)).toEqual({ thinking: null, closed: false, answer: '' });
    expect(splitThinking('<think>', qwen3, true)).toEqual({ thinking: '', closed: false, answer: '' });
  });

  it('keeps a finished reply cut off while thinking as thinking', () => {
    expect(splitThinking('<think>\nStep 1, step 2', qwen3, false)).toEqual({ thinking: 'Step 1, step 2', closed: false, answer: '' });
    expect(splitThinking('<thi', qwen3, false)).toEqual({ thinking: null, closed: false, answer: '<thi' });
  });

  it('takes everything before a close tag with no open tag as thinking (the prompt opened it)', () => {
    expect(splitThinking('Okay, so 2+2.\n</think>\n\n4', r1, false)).toEqual({ thinking: 'Okay, so 2+2.', closed: true, answer: '4' });
    expect(splitThinking('Okay</think>4', null, false, true)).toEqual({ thinking: 'Okay', closed: true, answer: '4' });
    // Without a prompt that opens the block, a reply that mentions the tag keeps its text.
    expect(splitThinking('Close it with </think> like so.', null, true)).toEqual({ thinking: null, closed: false, answer: 'Close it with </think> like so.' });
    expect(splitThinking('Okay</think>4', null, false)).toEqual({ thinking: null, closed: false, answer: 'Okay</think>4' });
  });

  it('treats a reply from a prompt-opened block as thinking until its close tag', () => {
    expect(splitThinking('Okay, so the user', r1, true)).toEqual({ thinking: 'Okay, so the user', closed: false, answer: '' });
    expect(splitThinking('Okay</', r1, true)).toEqual({ thinking: 'Okay', closed: false, answer: '' });
    // Finished without a close tag (an earlier reply, another model): plain text.
    expect(splitThinking('Just text', r1, false)).toEqual({ thinking: null, closed: false, answer: 'Just text' });
  });

  it('finds no thinking in other replies', () => {
    expect(splitThinking('The answer is 4.', qwen3, false)).toEqual({ thinking: null, closed: false, answer: 'The answer is 4.' });
    expect(splitThinking('The answer is 4.', qwen3, true)).toEqual({ thinking: null, closed: false, answer: 'The answer is 4.' });
    expect(splitThinking('Use <think> then </think> tags', qwen3, false)).toEqual({ thinking: null, closed: false, answer: 'Use <think> then </think> tags' });
    expect(splitThinking('', qwen3, true)).toEqual({ thinking: null, closed: false, answer: '' });
  });

  it('shows no block for empty thinking (Qwen3 with thinking off)', () => {
    expect(splitThinking('<think>\n\n</think>\n\nHello!', qwen3, false)).toEqual({ thinking: null, closed: true, answer: 'Hello!' });
    expect(splitThinking('<think>\n\n</think>\n\nHel', qwen3, true)).toEqual({ thinking: null, closed: true, answer: 'Hel' });
  });

  it("uses the template's own tags", () => {
    expect(splitThinking('<|begin_of_thought|>hmm<|end_of_thought|>\nok', other, false)).toEqual({ thinking: 'hmm', closed: true, answer: 'ok' });
    expect(splitThinking('<think>hmm</think>ok', other, false)).toEqual({ thinking: null, closed: false, answer: '<think>hmm</think>ok' });
  });

  it("reads Gemma 4's thought channel, as it streams and once stored", () => {
    const gemma4: ReasoningFormat = { open: '<|channel>thought', close: '<channel|>', switch: 'enable_thinking', openedByPrompt: false, ...tags };
    const reply = '<|channel>thought\nThe user adds.\n<channel|>It is **4**.';
    expect(splitThinking(reply, gemma4, false)).toEqual({ thinking: 'The user adds.', closed: true, answer: 'It is **4**.' });
    expect(splitThinking('<|channel>thought\nThe user', gemma4, true)).toEqual({ thinking: 'The user', closed: false, answer: '' });
    expect(splitThinking('<|channel>thou', gemma4, true)).toEqual({ thinking: null, closed: false, answer: '' });
    expect(splitThinking('<|channel>thought\nok<chan', gemma4, true)).toEqual({ thinking: 'ok', closed: false, answer: '' });
    // Thinking off: the prompt closed an empty channel, and the reply is all answer.
    expect(splitThinking('It is 4.', gemma4, false)).toEqual({ thinking: null, closed: false, answer: 'It is 4.' });
  });
});

describe('ThinkingCounter', () => {
  it('counts tokens until the close tag, even split across events', () => {
    const c = new ThinkingCounter('</think>');
    expect(c.push('<think>', 1)).toBeNull();
    expect(c.push('\nHmm', 2)).toBeNull();
    expect(c.push('</th', 1)).toBeNull();
    expect(c.push('ink>\n\n', 1)).toBe(5);
    expect(c.closed).toBe(true);
    expect(c.push('</think>', 1)).toBeNull();
  });

  it('knows a continued reply had closed already', () => {
    expect(new ThinkingCounter('</think>', '<think>a</think>b').closed).toBe(true);
    const c = new ThinkingCounter('</think>', '<think>a</thi');
    expect(c.push('nk>', 1)).toBe(1);
  });
});
