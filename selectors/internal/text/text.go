package text

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// Keys are the keys of m, sorted.
func Keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Uniq is s without repetitions, in the order of first appearance.
func Uniq(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// Closest returns the candidate nearest to name (case-insensitive edit distance at most a
// third of the name, at least 2), or a known synonym; "" when none is close.
func Closest(name string, candidates []string) string {
	synonyms := map[string]string{"model": "productName", "product": "productName", "name": "productName",
		"arch": "architecture", "computeCapability": "cudaComputeCapability", "cc": "cudaComputeCapability",
		"driver": "driverVersion", "cudaVersion": "cudaDriverVersion", "cudaRuntimeVersion": "cudaDriverVersion",
		"migProfile": "profile", "parent": "parentUUID"}
	if s, ok := synonyms[name]; ok {
		for _, c := range candidates {
			if c == s {
				return s
			}
		}
	}
	best, bestD := "", max(2, len(name)/3)+1
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(name), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	if best != "" || len(name) < 4 {
		return best
	}
	// A name with letters left out ("resourceName" for "resourceClassName").
	for _, c := range candidates {
		if len(c) <= 2*len(name) && isSubsequence(strings.ToLower(name), strings.ToLower(c)) && (best == "" || len(c) < len(best)) {
			best = c
		}
	}
	return best
}

func isSubsequence(s, of string) bool {
	i := 0
	for j := 0; i < len(s) && j < len(of); j++ {
		if s[i] == of[j] {
			i++
		}
	}
	return i == len(s)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// List joins at most n items, saying how many more there are.
func List(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:n], ", ") + fmt.Sprintf(" and %d more", len(items)-n)
}

// Quote writes s as a single-quoted CEL string literal.
func Quote(s string) string {
	var sb strings.Builder
	sb.WriteByte('\'')
	for _, r := range s {
		switch {
		case r == '\'' || r == '\\':
			sb.WriteByte('\\')
			sb.WriteRune(r)
		case r == '\n':
			sb.WriteString(`\n`)
		case r == '\t':
			sb.WriteString(`\t`)
		case r == utf8.RuneError:
			sb.WriteString(`\ufffd`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&sb, `\x%02x`, r)
		default:
			sb.WriteRune(r)
		}
	}
	sb.WriteByte('\'')
	return sb.String()
}

// SplitQualified splits "domain/name"; a name without a domain is in the default domain.
func SplitQualified(name, defaultDomain string) (domain, id string) {
	if i := strings.Index(name, "/"); i >= 0 {
		return name[:i], name[i+1:]
	}
	return defaultDomain, name
}

// Abbreviate shortens s to at most n bytes for messages, on one line.
func Abbreviate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// SortedKeys are the keys of a set, sorted.
func SortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Attribute is the CEL access to an attribute of a domain (device.attributes['domain'].name).
func Attribute(domain, name string) string {
	return fmt.Sprintf("device.attributes[%s].%s", Quote(domain), name)
}

// Glob is a CEL condition that a string access matches a glob: case-insensitive, "*" matches
// any run of characters, everything else literally.
func Glob(access, glob string) string {
	parts := strings.Split(strings.ToLower(glob), "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return access + ".lowerAscii().matches(" + Quote("^"+strings.Join(parts, ".*")+"$") + ")"
}
