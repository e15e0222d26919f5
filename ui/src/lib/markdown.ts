// Model output to HTML. The model's text is never trusted: raw HTML in it is
// escaped and shown as text (first guard), and the result goes through
// DOMPurify (second guard). Images are shown as links, so nothing loads.
import DOMPurify from 'dompurify';
import hljs from 'highlight.js/lib/common';
import { Marked, type Tokens } from 'marked';

export function escapeHtml(text: string): string {
  return text
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

const SAFE_URL = /^(https?:|mailto:)/i;

const marked = new Marked({
  gfm: true,
  breaks: true,
  async: false,
  renderer: {
    html(token: Tokens.HTML | Tokens.Tag) {
      return escapeHtml(token.text);
    },
    code(token: Tokens.Code) {
      const lang = (token.lang ?? '').trim().split(/\s+/)[0];
      const body =
        lang && hljs.getLanguage(lang)
          ? hljs.highlight(token.text, { language: lang, ignoreIllegals: true }).value
          : escapeHtml(token.text);
      const label = lang ? `<span class="code-lang">${escapeHtml(lang)}</span>` : '';
      return `<div class="code-block"><div class="code-bar">${label}<button type="button" class="copy-code" data-testid="copy-code">Copy</button></div><pre><code class="hljs">${body}</code></pre></div>`;
    },
    link(token: Tokens.Link) {
      const text = this.parser.parseInline(token.tokens);
      if (!SAFE_URL.test(token.href)) return text;
      return `<a href="${escapeHtml(token.href)}" title="${escapeHtml(token.href)}" rel="noreferrer">${text}</a>`;
    },
    image(token: Tokens.Image) {
      const label = escapeHtml(token.text || token.href);
      if (!SAFE_URL.test(token.href)) return label;
      return `<a href="${escapeHtml(token.href)}" rel="noreferrer">[image: ${label}]</a>`;
    },
  },
});

const PURIFY = {
  ALLOWED_TAGS: [
    'a', 'p', 'br', 'hr', 'em', 'strong', 'del', 's', 'code', 'pre', 'blockquote', 'ul', 'ol', 'li',
    'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'table', 'thead', 'tbody', 'tr', 'th', 'td', 'span', 'div',
    'button', 'input',
  ],
  ALLOWED_ATTR: ['href', 'title', 'rel', 'class', 'type', 'checked', 'disabled', 'data-testid', 'align'],
  ALLOW_DATA_ATTR: false,
};

/** Markdown to sanitised HTML. */
export function renderMarkdown(text: string): string {
  const html = marked.parse(text) as string;
  return DOMPurify.sanitize(html, PURIFY) as string;
}
