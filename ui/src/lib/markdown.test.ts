import { describe, expect, it } from 'vitest';
import { renderMarkdown } from './markdown';

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
