import { describe, expect, it } from 'vitest';
import { renderMarkdown, StreamingMarkdown, type StreamedHtml } from './markdown';

function render(text: string): HTMLElement {
  const div = document.createElement('div');
  div.innerHTML = renderMarkdown(text);
  return div;
}

describe('renderMarkdown', () => {
  it('shows raw HTML from the model as text', () => {
    const el = render('Look: <img src=x onerror="window.__xss=1"> and <script>window.__xss=2</script>');
    expect(el.querySelector('img')).toBeNull();
    expect(el.querySelector('script')).toBeNull();
    expect(el.textContent).toContain('<img src=x onerror="window.__xss=1">');
    expect(el.textContent).toContain('<script>window.__xss=2</script>');
  });

  it('shows block-level HTML as text', () => {
    const el = render('<div onclick="x()">\n<iframe src="https://example.com"></iframe>\n</div>');
    expect(el.querySelector('iframe')).toBeNull();
    expect(el.querySelector('[onclick]')).toBeNull();
    expect(el.textContent).toContain('<iframe');
  });

  it('drops javascript: links and never loads images', () => {
    const el = render('[click](javascript:alert(1)) ![pic](https://example.com/a.png) [ok](https://example.com)');
    const links = [...el.querySelectorAll('a')].map((a) => a.getAttribute('href'));
    expect(links).toEqual(['https://example.com/a.png', 'https://example.com']);
    expect(el.querySelector('img')).toBeNull();
    expect(el.textContent).toContain('click');
  });

  it('highlights fenced code and adds a copy button', () => {
    const el = render('```rust\nfn main() { println!("<hi>"); }\n```');
    expect(el.querySelector('.code-block button.copy-code')).not.toBeNull();
    expect(el.querySelector('code.hljs span')).not.toBeNull();
    expect(el.querySelector('code')!.textContent).toBe('fn main() { println!("<hi>"); }');
  });

  it('escapes code in unknown languages', () => {
    const el = render('```nosuchlang\n<b>bold</b>\n```');
    expect(el.querySelector('b')).toBeNull();
    expect(el.querySelector('code')!.textContent).toContain('<b>bold</b>');
  });

  it('renders ordinary Markdown', () => {
    const el = render('# Title\n\n**bold** and *it* and `code`\n\n- a\n- b');
    expect(el.querySelector('h1')!.textContent).toBe('Title');
    expect(el.querySelector('strong')!.textContent).toBe('bold');
    expect(el.querySelectorAll('li')).toHaveLength(2);
  });
});

const REPLY = [
  'A computer has **four** main parts:\n\n',
  '1. **Processor**: runs instructions.\n\n2. **Memory**: holds data.\n\n',
  '## Storage\n\nDisks keep data for good. See [docs](https://example.com).\n\n',
  '| part | job |\n|---|---|\n| CPU | compute |\n\n',
  '```python\nprint("<hi>")\n```\n\n',
  '> A quote\n\nThe end, with `code` and <b>raw html</b>.',
].join('');

/** Feeds `text` a few characters at a time, as tokens arrive. */
function stream(text: string, step = 3): StreamedHtml[] {
  const md = new StreamingMarkdown();
  const out: StreamedHtml[] = [];
  for (let i = step; i < text.length + step; i += step) out.push(md.update(text.slice(0, i)));
  return out;
}

function html(s: StreamedHtml): HTMLElement {
  const div = document.createElement('div');
  div.innerHTML = s.blocks.join('') + s.open;
  return div;
}

describe('StreamingMarkdown', () => {
  it('ends with the same HTML as rendering the whole reply', () => {
    const steps = stream(REPLY);
    expect(steps[steps.length - 1].blocks.join('') + steps[steps.length - 1].open).toBe(renderMarkdown(REPLY));
    expect(steps[steps.length - 1].blocks.length).toBeGreaterThan(5);
  });

  it('renders each finished block once and never changes it', () => {
    const steps = stream(REPLY);
    for (let i = 1; i < steps.length; i++) {
      expect(steps[i].blocks.slice(0, steps[i - 1].blocks.length)).toEqual(steps[i - 1].blocks);
    }
  });

  it('shows the same text as a whole render at every step', () => {
    for (let i = 1; i <= REPLY.length; i += 7) {
      const whole = document.createElement('div');
      whole.innerHTML = renderMarkdown(REPLY.slice(0, i));
      const md = new StreamingMarkdown();
      // Grow to i in two updates, so earlier blocks are already finished.
      md.update(REPLY.slice(0, Math.floor(i / 2)));
      expect(html(md.update(REPLY.slice(0, i))).textContent).toBe(whole.textContent);
    }
  });

  it('highlights a code block only once it is closed', () => {
    const md = new StreamingMarkdown();
    const open = html(md.update('Code:\n\n```rust\nfn main() {}\n'));
    expect(open.querySelector('code')!.textContent).toContain('fn main() {}');
    expect(open.querySelector('code span')).toBeNull();
    const closed = html(md.update('Code:\n\n```rust\nfn main() {}\n```\n\nDone'));
    expect(closed.querySelector('code span')).not.toBeNull();
  });

  it('escapes HTML in the block being written too', () => {
    const md = new StreamingMarkdown();
    const el = html(md.update('Hi\n\n<img src=x onerror="window.__xss=1"> <script>x()</script>'));
    expect(el.querySelector('img')).toBeNull();
    expect(el.querySelector('script')).toBeNull();
    expect(el.textContent).toContain('<img src=x');
  });

  it('starts over when the text is replaced', () => {
    const md = new StreamingMarkdown();
    md.update('First paragraph.\n\nSecond');
    const again = md.update('Other text');
    expect(again.blocks).toEqual([]);
    expect(html(again).textContent!.trim()).toBe('Other text');
  });
});
