package problem

import "testing"

func TestMalformedEscape(t *testing.T) {
	for s, want := range map[string]string{
		"postgres://herald:50%off@db/app":          "password",
		"redis://u%zz:pw@h:6379/0":                 "user",
		"redis://:pw%4@h:6379":                     "password",
		"postgres://herald@db/a%pp?sslmode=x":      "path",
		"postgres://herald:p%40ss@db/app?x=%zz":    "", // the query is not checked here
		"postgres://herald:p%40ss@db/app":          "",
		"redis://h:6379":                           "",
		"host=db password=50%off":                  "",         // not a URL
		"rediss://user:a@b%zz@h/0":                 "password", // the last @ ends the user info
		"postgresql://a:b@h/db%":                   "path",
		"redis://user:pass%2@h:6379/0?protocol=3":  "password",
		"postgres://us%er:secret@db:5432/app":      "user",
		"postgres://:@db/app":                      "",
		"postgres://herald:secret%ZZsecret@db/app": "password",
	} {
		if got := MalformedEscape(s); got != want {
			t.Errorf("MalformedEscape(%q) = %q, want %q", s, got, want)
		}
	}
}
