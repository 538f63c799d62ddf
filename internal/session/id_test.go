package session

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/wire"
)

// TestIDNamesItsNode: a session of a node with an id has "<node>.<random>" as its id, and
// NodeOf reads the node back; the random part is as strong with a node as without (18 bytes
// of base64url), and it holds no "." that would move the split.
func TestIDNamesItsNode(t *testing.T) {
	for _, node := range []string{"", "node-a", "01JD5ZP1N8Q3", "a_b"} {
		t.Run("node "+node, func(t *testing.T) {
			seen := map[string]bool{}
			for range 100 {
				s, err := New(Config{Codec: wire.Codec{}, Node: node}, Deps{}, newGated(), auth.Identity{Subject: "u"})
				if err != nil {
					t.Fatal(err)
				}
				id := s.ID()
				if seen[id] {
					t.Fatalf("id %q made twice", id)
				}
				seen[id] = true
				if got := NodeOf(id); got != node {
					t.Fatalf("NodeOf(%q) = %q, want %q", id, got, node)
				}
				random := id
				if node != "" {
					random = strings.TrimPrefix(id, node+".")
					if random == id {
						t.Fatalf("id %q does not start with %q", id, node+".")
					}
				}
				b, err := base64.RawURLEncoding.DecodeString(random)
				if err != nil || len(b) != 18 {
					t.Fatalf("id %q: random part %q is %d bytes (%v), want 18 of base64url", id, random, len(b), err)
				}
			}
		})
	}
}

func TestNodeOf(t *testing.T) {
	for id, want := range map[string]string{
		"":                             "",
		"abc":                          "",
		"node-a.abc":                   "node-a",
		".abc":                         "",
		"node-a.":                      "node-a",
		"a.b.c":                        "a",
		"AAAAAAAAAAAAAAA":              "",
		"a/b.c":                        "",
		"a%2e.c":                       "",
		"nœud.c":                       "",
		strings.Repeat("n", 64) + ".c": strings.Repeat("n", 64),
		strings.Repeat("n", 65) + ".c": "",
	} {
		if got := NodeOf(id); got != want {
			t.Errorf("NodeOf(%q) = %q, want %q", id, got, want)
		}
	}
}
