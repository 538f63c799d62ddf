package change

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// plainWordBytewise is what plainWord must answer: whether all eight bytes are plain.
func plainWordBytewise(w uint64) bool {
	for i := 0; i < 8; i++ {
		if !plain[byte(w>>(8*i))] {
			return false
		}
	}
	return true
}

func TestPlainWordMatchesTheTable(t *testing.T) {
	// Every byte value at every position, among neighbours that are plain, not plain, or
	// either: the borrows of the word-wide subtractions must never hide or invent a byte.
	rng := rand.New(rand.NewPCG(1, 2))
	fills := []func() byte{
		func() byte { return 'a' },
		func() byte { return 0 },
		func() byte { return 0xff },
		func() byte { return 0x21 },
		func() byte { return byte(rng.Uint32()) },
	}
	for _, fill := range fills {
		for pos := 0; pos < 8; pos++ {
			for v := 0; v < 256; v++ {
				for rep := 0; rep < 4; rep++ {
					var w uint64
					for i := 0; i < 8; i++ {
						b := fill()
						if i == pos {
							b = byte(v)
						}
						w |= uint64(b) << (8 * i)
					}
					if got, want := plainWord(w), plainWordBytewise(w); got != want {
						t.Fatalf("plainWord(%#016x) = %v, want %v", w, got, want)
					}
				}
			}
		}
	}
	for i := 0; i < 1_000_000; i++ {
		w := rng.Uint64()
		if got, want := plainWord(w), plainWordBytewise(w); got != want {
			t.Fatalf("plainWord(%#016x) = %v, want %v", w, got, want)
		}
	}
}

// appendJSONStringBytewise is AppendJSONString one byte at a time: the reference the word-wide
// scan must match byte for byte.
func appendJSONStringBytewise(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch {
			case plain[b]:
				dst = append(dst, b)
			case b == '"' || b == '\\':
				dst = append(dst, '\\', b)
			case b == '\n':
				dst = append(dst, '\\', 'n')
			case b == '\r':
				dst = append(dst, '\\', 'r')
			case b == '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

func FuzzAppendJSONStringMatchesBytewise(f *testing.F) {
	for _, s := range []string{"", "plain", "0123456789abcdef0123", "q\"b\\\n\t\x00", "é✓ and more plain text",
		"bad\xffbyte in a longer string", "\u2028\u2029........", strings.Repeat("x", 17) + "\"" + strings.Repeat("y", 9)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, want := AppendJSONString(nil, s), appendJSONStringBytewise(nil, s)
		if !bytes.Equal(got, want) {
			t.Fatalf("AppendJSONString(%q)\n got %s\nwant %s", s, got, want)
		}
	})
}

func BenchmarkAppendJSONString(b *testing.B) {
	for _, n := range []int{6, 18, 64, 1024} {
		s := strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789", n/36+1)[:n]
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			buf := make([]byte, 0, 2*n+2)
			b.SetBytes(int64(n))
			for b.Loop() {
				buf = AppendJSONString(buf[:0], s)
			}
		})
	}
}
