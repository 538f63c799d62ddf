package cluster

import (
	"strings"

	"github.com/heraldrt/herald/internal/channel"
)

// Owners and tokens. A channel's interest is filed under its namespace (the first segment of a
// pattern's anchor, "c:<segment>"; a pattern anchored at the root under "c:"), with the token
// "x:<name>" for an exact subscription and "p:<anchor>" for a pattern, so a publication to
// a/b/c looks up, in one read per owner, "p:" under "c:", and "p:a", "p:a/b", "x:a/b/c" under
// "c:a". A table's interest is filed under "t:<table>", with the token the router names for
// the subscription's filter (Tables.Tokens).

// ChannelInterest returns the owner and token a subscription to p is filed under.
func ChannelInterest(p channel.Pattern) (owner, token string) {
	anchor := p.Anchor()
	owner = "c:" + firstSegment(anchor)
	if p.IsExact() {
		return owner, "x:" + anchor
	}
	if anchor == "" {
		return "c:", "p:"
	}
	return owner, "p:" + anchor
}

// TableOwner is the owner a table's subscriptions are filed under.
func TableOwner(table string) string { return "t:" + table }

func firstSegment(s string) string {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i]
	}
	return s
}

type ownerTokens struct {
	owner  string
	tokens []string
}

// messageInterest returns the owners and tokens a publication to name looks up.
func messageInterest(name string) [2]ownerTokens {
	ns := ownerTokens{owner: "c:" + firstSegment(name)}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' {
			ns.tokens = append(ns.tokens, "p:"+name[:i])
		}
	}
	ns.tokens = append(ns.tokens, "x:"+name)
	return [2]ownerTokens{{owner: "c:", tokens: []string{"p:"}}, ns}
}
