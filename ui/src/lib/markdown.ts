// Model output to HTML. The model's text is never trusted: raw HTML in it is
// escaped and shown as text (first guard), and the result goes through
// DOMPurify (second guard). Images are shown as links, so nothing loads.
import DOMPurify from 'dompurify';
import hljs from 'highlight.js/lib/common';
import { Marked, type Token, type Tokens } from 'marked';

export function escapeHtml(text: string): string {
  return text
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

const SAFE_URL = /^(https?:|mailto:)/i;

/** A Marked instance; `highlight` off renders code as plain escaped text. */
function markdown(highlight: boolean): Marked {
  return new Marked({
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
          highlight && lang && hljs.getLanguage(lang)
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
}

const marked = markdown(true);
// The block still being written: highlighting waits until it closes.
const openBlock = markdown(false);

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
  return sanitize(marked.parse(text) as string);
}

function sanitize(html: string): string {
  return DOMPurify.sanitize(html, PURIFY) as string;
}

/** A streaming reply as HTML: `blocks` are finished and never change again,
 *  `open` is the block still being written. */
export type StreamedHtml = { blocks: string[]; open: string };

/**
 * Renders a reply as it grows, so a token costs the same at the 10th block
 * as at the 1st: every top-level block but the last is rendered (and
 * highlighted) once, when the next block begins; only the last one is
 * rendered again as text arrives. Text that does not extend what came
 * before (an edit, a new reply) starts over.
 *
 * Block boundaries are read by Marked's lexer from the text after the last
 * finished block. Markdown that reaches back across blocks (a link
 * definition after its use) shows in full once the reply is finished and
 * rendered whole by `renderMarkdown`.
 */
export class StreamingMarkdown {
  #text = '';
  #finished = 0;
  #blocks: string[] = [];

  update(text: string): StreamedHtml {
    if (!text.startsWith(this.#text.slice(0, this.#finished))) {
      this.#finished = 0;
      this.#blocks = [];
    }
    this.#text = text;
    let tokens: Token[] = marked.lexer(text.slice(this.#finished));
    let last = tokens.length - 1;
    while (last > 0 && tokens[last].type === 'space') last--;
    if (last > 0) {
      const done = tokens.slice(0, last);
      const raw = done.map((t) => t.raw).join('');
      // The lexer's raw text covers its input exactly; if it ever did not,
      // the reply is rendered as one open block rather than cut wrongly.
      if (text.startsWith(raw, this.#finished)) {
        this.#blocks.push(sanitize(marked.parser(done)));
        this.#finished += raw.length;
        tokens = tokens.slice(last);
      }
    }
    return { blocks: [...this.#blocks], open: sanitize(openBlock.parser(tokens)) };
  }
}
