package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxFileBytes bounds the config file read. The largest real file, with a few PEM keys inline,
// is a few tens of KiB; anything near this bound is the wrong file.
const maxFileBytes = 1 << 20

// Load reads the config file at path (none when path is ""), applies the HERALD_* variables of
// env (os.Environ's form, key=value) over it, and validates the result. Every error is *Error.
func Load(path string, env []string) (*Config, error) {
	c, err := Read(path, env)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Read is Load without Validate: the file and the variables read, every key and variable
// known and every value parsed, but not checked against each other. For `herald doctor`,
// which reports every problem (Problems) rather than the first. Every error is *Error.
func Read(path string, env []string) (*Config, error) {
	c := Default()
	if path != "" {
		data, err := readFile(path)
		if err != nil {
			return nil, err
		}
		if err := c.decodeFile(path, data); err != nil {
			return nil, err
		}
	}
	if err := c.applyEnv(env); err != nil {
		return nil, err
	}
	return c, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{Stage: stage, Source: path, Detail: "cannot read the config file: " + err.Error(),
			Fix: "check the path given to herald serve, or give none to run on the defaults and HERALD_* variables", Err: err}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, &Error{Stage: stage, Source: path, Detail: "cannot read the config file: " + err.Error(), Err: err}
	}
	if len(data) > maxFileBytes {
		return nil, &Error{Stage: stage, Source: path, Detail: fmt.Sprintf("the config file is larger than %s", Size(maxFileBytes)),
			Fix: "check that this is Herald's config file; keep key material in files named by auth.public_keys or auth.jwks_file"}
	}
	return data, nil
}

// yamlLine finds the line in a yaml.v3 parse error, to report it as file:line.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// decodeFile applies the YAML document in data, read from name, over c. The document is read
// into a yaml.Node tree and walked against Config's keys, rather than unmarshalled into the
// struct, so that an unknown or duplicated key is reported with its line, and every value is
// parsed by the same code as the environment's.
func (c *Config) decodeFile(name string, data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty, or only comments: all defaults
		}
		return parseError(name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return parseError(name, err)
		}
		return &Error{Stage: stage, Source: fmt.Sprintf("%s:%d", name, extra.Line),
			Detail: "the file holds a second YAML document (after ---)",
			Fix:    "keep one document: remove the --- and merge the settings into the first"}
	}
	root := resolve(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = resolve(root.Content[0])
	}
	if isNull(root) {
		return nil
	}
	d := fileDecoder{c: c, name: name}
	return d.mapping(root, "")
}

func parseError(name string, err error) error {
	e := &Error{Stage: stage, Source: name, Detail: "not valid YAML: " + err.Error(), Err: err,
		Fix: "correct the YAML syntax; indent with spaces, and quote values that contain ': ' or start with a special character"}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		e.Source = name + ":" + m[1]
		e.Detail = "not valid YAML: " + m[2]
	}
	return e
}

type fileDecoder struct {
	c    *Config
	name string
}

func (d fileDecoder) at(n *yaml.Node) string { return fmt.Sprintf("%s:%d", d.name, n.Line) }

// mapping applies the mapping n to the section named prefix ("" for the top level).
func (d fileDecoder) mapping(n *yaml.Node, prefix string) error {
	section := strings.TrimSuffix(prefix, ".")
	if n.Kind != yaml.MappingNode {
		what := "the file"
		if section != "" {
			what = section
		}
		return &Error{Stage: stage, Key: section, Source: d.at(n),
			Detail: fmt.Sprintf("%s is a %s, want a mapping of keys to values", what, kindName(n)),
			Fix:    "write one key: value per line" + sectionHint(section)}
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := resolve(n.Content[i]), resolve(n.Content[i+1])
		if kn.Kind != yaml.ScalarNode {
			return &Error{Stage: stage, Key: section, Source: d.at(kn),
				Detail: fmt.Sprintf("a key is a %s, want a name", kindName(kn)), Fix: "write one key: value per line" + sectionHint(section)}
		}
		name := prefix + kn.Value
		if strings.ContainsAny(kn.Value, ".[") {
			k, ok := keyNamed(name)
			if !ok || isSection(name) {
				return unknownKey(name, d.at(kn))
			}
			section, leaf, _ := strings.Cut(k.Name, ".")
			return &Error{Stage: stage, Key: name, Source: d.at(kn), Detail: "a dotted name is not a key in the file",
				Fix: fmt.Sprintf("nest it: %s: on one line, then %s: indented under it (or %s=... in the environment)", section, leaf, k.Env)}
		}
		if line, dup := seen[kn.Value]; dup {
			return &Error{Stage: stage, Key: name, Source: d.at(kn),
				Detail: fmt.Sprintf("is set twice, here and on line %d", line), Fix: "keep one of them"}
		}
		seen[kn.Value] = kn.Line
		if isRules(name) {
			if err := d.rules(name, vn); err != nil {
				return err
			}
			continue
		}
		if isSection(name) {
			if isNull(vn) {
				continue
			}
			if err := d.mapping(vn, name+"."); err != nil {
				return err
			}
			continue
		}
		k, ok := keyNamed(name)
		if !ok {
			return unknownKey(name, d.at(kn))
		}
		if err := d.leaf(k, vn); err != nil {
			return err
		}
	}
	return nil
}

// leaf sets k from the value node n. A null value (key: with nothing after it, or ~) leaves
// the default in place, as yaml.v3 does when unmarshalling.
func (d fileDecoder) leaf(k Key, n *yaml.Node) error {
	if isNull(n) {
		return nil
	}
	bad := func(detail, fix string) error {
		return &Error{Stage: stage, Key: k.Name, Source: d.at(n), Detail: detail, Fix: fix}
	}
	if k.typ == typList {
		if n.Kind != yaml.SequenceNode {
			return bad(fmt.Sprintf("is a %s, want a list", kindName(n)),
				"write it as a list, e.g. "+k.yamlExample(exampleFor(k))+", or one \"- item\" per line")
		}
		items := make([]string, 0, len(n.Content))
		for i, item := range n.Content {
			item = resolve(item)
			if item.Kind != yaml.ScalarNode || isNull(item) {
				return &Error{Stage: stage, Key: fmt.Sprintf("%s[%d]", k.Name, i), Source: d.at(item),
					Detail: fmt.Sprintf("is a %s, want a string", kindName(item)), Fix: "give each entry as a string, or remove it"}
			}
			items = append(items, item.Value)
		}
		k.setList(d.c, items)
	} else {
		if n.Kind != yaml.ScalarNode {
			return bad(fmt.Sprintf("is a %s, want a single value", kindName(n)), k.fix("a single value", exampleFor(k)))
		}
		if err := k.set(d.c, n.Value, false); err != nil {
			return bad(err.Error(), k.fix(wantFor(k), exampleFor(k)))
		}
	}
	d.c.setSource(k.Name, d.at(n))
	return nil
}

// resolve follows an alias (*name) to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	// An alias may name another alias' target but never itself: the parser refuses an alias
	// to an anchor not yet complete. The bound is for safety all the same.
	for i := 0; i < 16 && n.Kind == yaml.AliasNode && n.Alias != nil; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "null"
		}
		return "single value"
	case yaml.AliasNode:
		return "alias"
	}
	return "document"
}

// isSection reports whether name is a section (auth, limits, ...) rather than a key.
func isSection(name string) bool {
	for _, k := range keys() {
		if strings.HasPrefix(k.Name, name+".") {
			return true
		}
	}
	return false
}

func sectionHint(section string) string {
	if section == "" {
		return ", e.g. listen: 127.0.0.1:8080"
	}
	for _, k := range keys() {
		if strings.HasPrefix(k.Name, section+".") {
			return fmt.Sprintf(", indented under %s:, e.g. %s", section, k.yamlExample(exampleFor(k)))
		}
	}
	return ""
}

// unknownKey reports a key in the file that Config does not have, with the key meant if one
// is near: the nearest key (or section) in the same section, or the same name in another.
func unknownKey(name, source string) error {
	if len(name) > maxNameShown {
		name = name[:maxNameShown] + "…"
	}
	section, leaf := "", name
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		section, leaf = name[:i], name[i+1:]
	}
	var same []string
	for _, k := range keys() {
		s, l := "", k.Name
		if i := strings.LastIndexByte(k.Name, '.'); i >= 0 {
			s, l = k.Name[:i], k.Name[i+1:]
		}
		if l == leaf && s != section {
			where := "at the top level"
			if s != "" {
				where = "under " + s + ":"
			}
			return &Error{Stage: stage, Key: name, Source: source, Detail: "unknown key",
				Fix: fmt.Sprintf("did you mean %s? it belongs %s", k.Name, where)}
		}
		if s == section {
			same = append(same, l)
		} else if top, _, _ := strings.Cut(k.Name, "."); section == "" && !slices.Contains(same, top) {
			same = append(same, top) // a section, as a top-level key
		}
	}
	where := "The top-level keys are "
	if section != "" {
		where = "The keys of " + section + " are "
	}
	return &Error{Stage: stage, Key: name, Source: source, Detail: "unknown key", Fix: suggestFix(leaf, same, where+strings.Join(same, ", "))}
}

// maxNameShown bounds an unknown name quoted in an error: no real key is half as long, and a
// line of junk need not be echoed whole.
const maxNameShown = 64

func suggestFix(got string, candidates []string, list string) string {
	if len(got) <= maxNameShown {
		if s := suggest(got, candidates); s != "" {
			return fmt.Sprintf("did you mean %s? %s", s, list)
		}
	}
	return "remove it, or correct its name. " + list
}

// applyEnv applies the HERALD_* variables of env over c. A variable set to "" counts as unset.
// An unknown HERALD_* variable is an error: Herald owns the prefix, so an unknown name is a
// typo whose value would otherwise be dropped without a word.
func (c *Config) applyEnv(env []string) error {
	vars := map[string]string{}
	var unknown []string
	byEnv := map[string]Key{}
	for _, k := range keys() {
		byEnv[k.Env] = k
	}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || exempt(name) {
			continue
		}
		if _, ok := byEnv[name]; !ok && name != aliasDatabaseURL {
			if !slices.Contains(unknown, name) {
				unknown = append(unknown, name)
			}
			continue
		}
		vars[name] = value // the last of duplicates wins, as in exec.Cmd.Env
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return unknownEnv(unknown)
	}
	// The alias stands in for the database URL's own variable when that is unset.
	cf := mustKey("changefeed.database_url")
	urlVar := cf.Env
	if alias := vars[aliasDatabaseURL]; alias != "" {
		if own := vars[cf.Env]; own != "" && own != alias {
			return &Error{Stage: stage, Key: cf.Name, Source: "env " + cf.Env,
				Detail: fmt.Sprintf("%s and %s are both set, to different databases", cf.Env, aliasDatabaseURL),
				Fix:    fmt.Sprintf("unset one of them; %s is the alias `herald tail` reads", aliasDatabaseURL)}
		}
		if vars[cf.Env] == "" {
			vars[cf.Env], urlVar = alias, aliasDatabaseURL
		}
	}
	for _, k := range keys() {
		v := vars[k.Env]
		if v == "" {
			continue
		}
		source := "env " + k.Env
		if k.Name == cf.Name {
			source = "env " + urlVar
		}
		if err := k.set(c, v, true); err != nil {
			return &Error{Stage: stage, Key: k.Name, Source: source, Detail: err.Error(), Fix: k.fix(wantFor(k), exampleFor(k))}
		}
		if k.typ == typList {
			k.setList(c, k.field(c).Interface().([]string))
		}
		c.setSource(k.Name, source)
	}
	return nil
}

func exempt(name string) bool {
	for _, p := range exemptEnv {
		if name == p || strings.HasPrefix(name, p+"_") {
			return true
		}
	}
	return false
}

func unknownEnv(names []string) error {
	var known []string
	for _, k := range keys() {
		known = append(known, k.Env)
	}
	known = append(known, aliasDatabaseURL)
	for i, n := range names {
		if len(n) > maxNameShown {
			names[i] = n[:maxNameShown] + "…"
		}
	}
	e := &Error{Stage: stage, Key: names[0], Source: "env " + names[0],
		Detail: "unknown environment variable: Herald reads every HERALD_* variable, so a misspelt one would be ignored without a word"}
	if len(names) > 1 {
		e.Detail += fmt.Sprintf(" (also unknown: %s)", strings.Join(names[1:], ", "))
	}
	if s := suggest(names[0], known); s != "" {
		e.Fix = fmt.Sprintf("did you mean %s? Otherwise unset %s; docs/CONFIG.md lists every variable", s, names[0])
		return e
	}
	e.Fix = fmt.Sprintf("unset %s, or correct its name; docs/CONFIG.md lists every variable (HERALD_TEST*, HERALD_DEMO* are left to the scripts)", names[0])
	return e
}

func (c *Config) setSource(key, source string) {
	if c.sources == nil {
		c.sources = map[string]string{}
	}
	c.sources[key] = source
}

// source returns where key's value came from, or "" for a default.
func (c *Config) source(key string) string {
	key, _, _ = strings.Cut(key, "[")
	return c.sources[key]
}

// wantFor describes the values k takes, for a fix.
func wantFor(k Key) string {
	switch k.typ {
	case typBool:
		return "true or false"
	case typInt:
		return "a whole number"
	case typSize:
		return "a size in bytes, KiB, MiB or GiB"
	case typDuration:
		return "a duration"
	case typList:
		return "a list"
	}
	return "a string"
}

// exampleFor returns a valid example value of k, written as in the environment.
func exampleFor(k Key) string {
	if ex, ok := examples[k.Name]; ok {
		return ex
	}
	return k.Format(Default())
}

// examples are the example values of keys whose default is empty or says nothing.
var examples = map[string]string{
	"public_url":                      "https://realtime.example.com",
	"admin_listen":                    "127.0.0.1:9091",
	"auth.secrets":                    "<at least 32 random bytes, e.g. from openssl rand -base64 48>",
	"auth.public_keys":                "/etc/herald/issuer.pem",
	"auth.jwks_file":                  "/etc/herald/jwks.json",
	"auth.issuer":                     "https://auth.example.com/",
	"auth.audience":                   "herald",
	"auth.allow_anonymous":            "true",
	"auth.allow_no_expiry":            "true",
	"api.keys":                        "<at least 16 random bytes, e.g. from openssl rand -base64 24>",
	"channels.client_publish":         "true",
	"changefeed.database_url":         "postgres://herald@db.internal:5432/app?sslmode=verify-full",
	"changefeed.tables":               "public.items,public.orders",
	"changefeed.full_identity_tables": "public.items",
	"changefeed.tenant_column":        "org_id",
	"changefeed.message_prefixes":     "app.events",
	"redis.url":                       "redis://redis.internal:6379",
	"cluster.node_id":                 "node-a",
	"cluster.advertise_url":           "http://10.0.0.5:8080",
}
