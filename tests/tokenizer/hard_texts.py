"""The hard corpus the tokenizer conformance tests run (test_hf_conformance.py,
test_tiktoken_conformance.py): the repository's corpus files, whitespace runs,
CRLF, tabs, leading spaces, digit runs, contractions in several cases, CJK,
Thai, emoji with ZWJ and skin tones, combining marks, NFD and NFKC-sensitive
text, code, URLs, HTML, characters that need byte fallback, the empty string,
and a tokenizer's added tokens inside ordinary text."""
import os
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))


def corpus(added_tokens):
    """(name, text) pairs: the files of corpus/, hard cases, and `added_tokens` (their text) inside text."""
    cases = []
    for name in sorted(os.listdir(os.path.join(HERE, 'corpus'))):
        with open(os.path.join(HERE, 'corpus', name), encoding='utf-8') as f:
            cases.append((name, f.read()))
    hard = {
        'empty': '',
        'one space': ' ',
        'spaces': '   ',
        'leading spaces': '   leading spaces and  two  inside',
        'trailing spaces': 'trailing spaces   ',
        'whitespace runs': 'a  b   c    d\t\te\n\n\nf \n g\r\n\r\nh\u3000i\u00a0j',
        'crlf': 'line one\r\nline two\r\n\r\nline four\r',
        'tabs': '\tindented\n\t\tdouble\n    four spaces\n\t \t mixed',
        'newlines only': '\n\n\n',
        'digits': '1 12 123 1234 12345 123456789 3.14159 1,000,000 007 2024-12-03 10:45pm +44 20 7946 0958',
        'digit runs': '0' * 40 + ' ' + '9876543210' * 3,
        'contractions': "I'm you're he's we've they'll she'd it's don't CAN'T I'M YOU'RE HE'S We'Ve tHEY'LL",
        'cjk': '我们在北京的大学学习中文。日本語のテキストと、한국어 문장입니다. 漢字かな交じり文',
        'thai': 'ภาษาไทยเป็นภาษาที่ไม่มีการเว้นวรรคระหว่างคำ สวัสดีครับ',
        'arabic hebrew': 'مرحبا بالعالم שלום עולם',
        'emoji': 'Family: 👨\u200d👩\u200d👧\u200d👦 thumbs 👍🏽👍🏿 flags 🇫🇷🇯🇵 heart ❤️ keycap 1️⃣',
        'combining': 'e\u0301te\u0301 n\u0303 a\u0308 Z\u0351\u0352\u0353algo',
        'nfd': unicodedata.normalize('NFD', 'Crème brûlée, naïve café, Ångström, Ελληνικά'),
        'nfkc-sensitive': 'ﬁne ﬀ ① ２０２４ ｈａｌｆｗｉｄｔｈ ™ ℌ',
        'code': 'def f(x):\n    return {"a": [1, 2, 3], \'b\': x ** 2}  # comment\n\nif x != 0:\n\tprint(f"{x!r}")\n',
        'c++': '#include <vector>\nint main() { std::vector<int> v{1,2}; for (auto& x : v) x <<= 1; return 0; }\n',
        'url': 'See https://example.com/path?q=1&r=two#frag and mailto:someone@example.org, or ftp://x.y/z.',
        'html': '<html><body><p class="x">Hello &amp; <b>world</b></p><br/></body></html>',
        'punctuation': '!!! ??? ... --- ___ *** ((())) [[]] {{}} "quoted" \'single\' `back` ~tilde~ @at #hash $5 %20',
        'byte fallback': 'rare: \U00020000\U0002a6d6 \U0001d11e \ue000\uf8ff \U000e0041 \u2028 \u0085 \ufeff \u200b',
        'mixed scripts': 'Hello мир 世界 κόσμος עולם दुनिया 🌍!',
        'long word': 'Pneumonoultramicroscopicsilicovolcanoconiosis' * 3,
        'repeated': 'abc ' * 200,
        'underscores': '__init__ __name__ == "__main__" snake_case_name CamelCaseName',
        'metaspace literal': '▁already▁has▁metaspace ▁ ▁▁',
        'hex-looking tokens': '<0x0A> <0xFF> <unk> <s> </s>',
    }
    cases += list(hard.items())
    # The special and added tokens' own text inside ordinary text.
    specials = ''.join(f'x{t}y {t} ' for t in added_tokens)
    cases.append(('added tokens in text', specials))
    cases.append(('added tokens glued', ''.join(added_tokens)))
    if added_tokens:
        t = added_tokens[0]
        cases.append(('added token start', t + 'Hello world'))
        cases.append(('added token spaces', f'  {t}  world {t}\n{t}'))
    return cases
