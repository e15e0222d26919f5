"""The tokenizer corpus: at least 200 strings covering what chat users type.

Deterministic; record_tokenizer.py feeds it to llama.cpp.
"""

BASE = [
    "", " ", "  ", "\n", "\n\n", "\r\n", "\t", " \t \n ",
    "Hello", "Hello, world!", " Hello", "hello world", "HELLO WORLD",
    "What is 2 + 2?", "What is the capital of France?",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you're right, they'll see we've done it and he'd agree.",
    "don't DON'T Don't", "It's 3:45pm on 2024-12-31.",
    "1234567890", "3.14159", "1,000,000", "0x1F 0b1010 1e-5", "v1.2.3-beta+build.5",
    "Ünïcödé çhäräctérs", "naïve café résumé", "Straße", "日本語のテキスト", "中文分词测试",
    "한국어 텍스트", "Привет, мир!", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया",
    "🦀", "🔥🔥🔥", "👩‍👩‍👧‍👦 family", "🇫🇷🇯🇵", "emoji at end 😀", "😀 emoji at start", "mixed 👍🏽 skin",
    "def f(x):\n    return x * 2\n", "fn main() {\n    println!(\"hi\");\n}\n",
    "for (int i = 0; i < n; i++) { sum += a[i]; }", "<div class=\"x\">text</div>", "SELECT * FROM users WHERE id = 42;",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}", "x = {'a': 1, 'b': [True, None]}",
    "    indented with spaces", "\tindented with tab", "trailing spaces   ", "multiple   spaces   inside",
    "line1\nline2\nline3", "line1\r\nline2\r\n", "para one\n\npara two", "\n\n\nleading newlines", "a\u00a0b non-breaking",
    "<|im_start|>user\nHi<|im_end|>\n", "<|im_start|>assistant\n", "text <|im_end|> more", "<|endoftext|>",
    "<|im_start|><|im_end|>", "not special: <|im_sta rt|>", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Users\\name\\file.txt", "/usr/local/bin/python3",
    "$100.00 and €50,25 and £3", "50% off!!!", "???!!!...", "---===___", "***bold*** _it_ `code`",
    "# Heading\n\n- item 1\n- item 2\n", "| a | b |\n|---|---|\n| 1 | 2 |", "> quoted text",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "abababababababababab", "the the the the the",
    "Supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
    "A", "a", "I", ".", ",", "!", "?", "'", "\"", "(", ")", "[]", "{}",
    # Gemma's turn markers and SentencePiece's own space character.
    "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "<bos>text", "a<eos>b", "▁already▁escaped", "<0x41>",
]

WORDS = ["apple", "Banana", "cherry", "42", "x", "über", "naïve", "東京", "🚀", "don't", "C++", "e.g.", "U.S.A.", "--flag", "snake_case", "camelCase", "PascalCase", "kebab-case"]
SEPS = [" ", "  ", "\n", "\t", ", ", ". ", "\r\n", "", " - "]


def corpus():
    out = list(BASE)
    # Deterministic combinations for breadth.
    i = 0
    while len(out) < 260:
        a = WORDS[i % len(WORDS)]
        b = WORDS[(i * 7 + 3) % len(WORDS)]
        c = WORDS[(i * 11 + 5) % len(WORDS)]
        s1 = SEPS[i % len(SEPS)]
        s2 = SEPS[(i * 5 + 1) % len(SEPS)]
        out.append(a + s1 + b + s2 + c)
        i += 1
    # Whitespace runs of many lengths.
    for n in range(1, 17):
        out.append("x" + " " * n + "y")
        out.append("x" + "\n" * n + "y")
    # Numbers of many lengths (digit splitting).
    for n in range(1, 13):
        out.append("".join(str((k * 7) % 10) for k in range(n)))
    return out


if __name__ == "__main__":
    c = corpus()
    print(len(c), "strings")
