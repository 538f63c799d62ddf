package auth

import (
	"fmt"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// BenchmarkVerify measures one Verify per connection attempt, by alg and by the size of the
// claims (a bare token, and one carrying a group list like some identity providers send).
func BenchmarkVerify(b *testing.B) {
	cfg := allKeysConfig(b)
	v := mustNew(b, cfg)
	sizes := []struct {
		name   string
		claims func() jwt.MapClaims
	}{
		{"claims=small", goodClaims},
		{"claims=groups_64", func() jwt.MapClaims {
			groups := make([]string, 64)
			for i := range groups {
				groups[i] = fmt.Sprintf("group-%02d-%s", i, strings.Repeat("x", 24))
			}
			return with(goodClaims(), "groups", groups)
		}},
	}
	algs := []struct {
		name   string
		method jwt.SigningMethod
		key    func() any
		hdr    map[string]any
	}{
		{"HS256", jwt.SigningMethodHS256, func() any { return []byte(hsSecret()) }, nil},
		{"ES256", jwt.SigningMethodES256, func() any { return ecKey256() }, nil},
		{"RS256_kid", jwt.SigningMethodRS256, func() any { return rsaKeyB() }, map[string]any{"kid": "rsa-b"}},
	}
	for _, a := range algs {
		for _, s := range sizes {
			token := sign(b, a.method, a.key(), s.claims(), a.hdr)
			b.Run(a.name+"/"+s.name, func(b *testing.B) {
				b.SetBytes(int64(len(token)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := v.Verify(token); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
	// A refused token costs no signature check at all.
	b.Run("refused_alg_none", func(b *testing.B) {
		token := rawToken(map[string]any{"alg": "none"}, goodClaims(), nil)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.Verify(token); err == nil {
				b.Fatal("alg none verified")
			}
		}
	})
}
