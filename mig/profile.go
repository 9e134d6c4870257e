package mig

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Attribute names used in profile suffixes.
const (
	// AttributeMediaExtensions is "me": "+me" adds media engines, "-me" removes them.
	AttributeMediaExtensions = "me"
	// AttributeMediaExtensionsAll is "me.all": all media engines of the GPU ("+me.all").
	AttributeMediaExtensionsAll = "me.all"
	// AttributeGraphics is "gfx": a graphics-capable instance ("+gfx").
	AttributeGraphics = "gfx"
)

// maxProfileNumber bounds the numbers of a profile name; no GPU comes close.
const maxProfileNumber = 1 << 20

// Profile is a parsed MIG profile name: "[<C>c.]<G>g.<GB>gb" followed by an optional "+attr,..." or
// "-attr,..." suffix, e.g. "1g.5gb", "1c.2g.10gb", "1g.10gb+me", "1g.24gb-me", "1g.24gb+me.all",
// "1g.24gb+gfx". It says nothing about whether a GPU supports the profile; see Model.Profile.
type Profile struct {
	// C is the compute-slice count of the compute instance when the name spells it ("1c.2g.10gb"),
	// and 0 when the name has no "c" field (the compute instance fills the GPU instance).
	C int
	// G is the compute-slice count of the GPU instance.
	G int
	// GB is the memory in GB as written in the name.
	GB int
	// Attributes are the names after "+", in the order written (e.g. ["me"], ["me.all"], ["gfx"]).
	Attributes []string
	// NegAttributes are the names after "-", in the order written (e.g. ["me"] for "1g.24gb-me").
	NegAttributes []string
}

// ProfileSyntaxError reports a malformed profile name: the input, the byte offset where parsing
// failed and why.
type ProfileSyntaxError struct {
	// Input is the whole string that was parsed.
	Input string
	// Pos is the byte offset of the offending character (len(Input) at the end of input).
	Pos int
	// Reason says what was expected or wrong.
	Reason string
}

// Error implements error.
func (e *ProfileSyntaxError) Error() string {
	return fmt.Sprintf("invalid MIG profile %q at byte %d: %s", e.Input, e.Pos, e.Reason)
}

type profileScanner struct {
	s   string
	pos int
}

func (sc *profileScanner) fail(pos int, format string, args ...any) error {
	return &ProfileSyntaxError{Input: sc.s, Pos: pos, Reason: fmt.Sprintf(format, args...)}
}

func (sc *profileScanner) peek() byte {
	if sc.pos < len(sc.s) {
		return sc.s[sc.pos]
	}
	return 0
}

func (sc *profileScanner) describe(pos int) string {
	if pos >= len(sc.s) {
		return "end of input"
	}
	return strconv.QuoteRune(rune(sc.s[pos]))
}

// number reads a positive decimal number without leading zeros.
func (sc *profileScanner) number(what string) (int, error) {
	start := sc.pos
	for sc.pos < len(sc.s) && sc.s[sc.pos] >= '0' && sc.s[sc.pos] <= '9' {
		sc.pos++
	}
	if sc.pos == start {
		return 0, sc.fail(start, "expected a number (%s), found %s", what, sc.describe(start))
	}
	digits := sc.s[start:sc.pos]
	if len(digits) > 1 && digits[0] == '0' {
		return 0, sc.fail(start, "leading zero in %s %q", what, digits)
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n > maxProfileNumber {
		return 0, sc.fail(start, "%s %q is too large", what, digits)
	}
	if n == 0 {
		return 0, sc.fail(start, "%s must be at least 1", what)
	}
	return n, nil
}

// literal consumes lit or fails.
func (sc *profileScanner) literal(lit, context string) error {
	if strings.HasPrefix(sc.s[sc.pos:], lit) {
		sc.pos += len(lit)
		return nil
	}
	// Point at the first byte that differs.
	p := sc.pos
	for i := 0; i < len(lit) && p < len(sc.s) && sc.s[p] == lit[i]; i++ {
		p++
	}
	return sc.fail(p, "expected %q %s, found %s", lit, context, sc.describe(p))
}

func isAlpha(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }
func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// attributes reads a comma-separated attribute list up to the end of input.
func (sc *profileScanner) attributes() ([]string, error) {
	var out []string
	for {
		start := sc.pos
		if start >= len(sc.s) || sc.s[start] == ',' {
			return nil, sc.fail(start, "empty attribute")
		}
		if !isAlpha(sc.s[start]) {
			return nil, sc.fail(start, "attribute must start with a letter, found %s", sc.describe(start))
		}
		for sc.pos < len(sc.s) && sc.s[sc.pos] != ',' {
			b := sc.s[sc.pos]
			if !isAlpha(b) && !isDigit(b) && b != '.' {
				return nil, sc.fail(sc.pos, "invalid character %s in attribute (letters, digits and '.' allowed)", sc.describe(sc.pos))
			}
			if b == '.' && sc.pos > start && sc.s[sc.pos-1] == '.' {
				return nil, sc.fail(sc.pos, "empty component in attribute")
			}
			sc.pos++
		}
		attr := sc.s[start:sc.pos]
		if attr[len(attr)-1] == '.' {
			return nil, sc.fail(sc.pos-1, "attribute %q must not end with '.'", attr)
		}
		if slices.Contains(out, attr) {
			return nil, sc.fail(start, "duplicate attribute %q", attr)
		}
		out = append(out, attr)
		if sc.pos == len(sc.s) {
			return out, nil
		}
		sc.pos++ // ','
	}
}

// ParseProfile parses a MIG profile name. Malformed names give a *ProfileSyntaxError with the byte
// offset and the reason. Numbers must be positive and written without leading zeros, a compute
// instance may not have more slices than its GPU instance, and the suffix is either "+attrs" or
// "-attrs". String of the result gives back s exactly.
func ParseProfile(s string) (Profile, error) {
	sc := &profileScanner{s: s}
	var p Profile
	if s == "" {
		return p, sc.fail(0, "empty profile name")
	}
	n, err := sc.number("slice count")
	if err != nil {
		return p, err
	}
	switch sc.peek() {
	case 'c':
		sc.pos++
		p.C = n
		if err := sc.literal(".", "after the compute-instance slice count"); err != nil {
			return p, err
		}
		g, err := sc.number("GPU-instance slice count")
		if err != nil {
			return p, err
		}
		if err := sc.literal("g", "after the GPU-instance slice count"); err != nil {
			return p, err
		}
		p.G = g
		if p.C > p.G {
			return p, sc.fail(0, "compute instance has %d slices, more than its GPU instance's %d", p.C, p.G)
		}
	case 'g':
		sc.pos++
		p.G = n
	default:
		return p, sc.fail(sc.pos, "expected 'c' or 'g' after the slice count, found %s", sc.describe(sc.pos))
	}
	if err := sc.literal(".", "after the slice count"); err != nil {
		return p, err
	}
	gb, err := sc.number("memory size")
	if err != nil {
		return p, err
	}
	p.GB = gb
	if err := sc.literal("gb", "after the memory size"); err != nil {
		return p, err
	}
	switch sc.peek() {
	case 0:
		if sc.pos != len(s) {
			return p, sc.fail(sc.pos, "unexpected NUL byte")
		}
		return p, nil
	case '+':
		sc.pos++
		p.Attributes, err = sc.attributes()
	case '-':
		sc.pos++
		p.NegAttributes, err = sc.attributes()
	default:
		return p, sc.fail(sc.pos, "expected end of name, '+' or '-', found %s", sc.describe(sc.pos))
	}
	if err != nil {
		return Profile{}, err
	}
	return p, nil
}

// MustParseProfile is ParseProfile for constants; it panics on error.
func MustParseProfile(s string) Profile {
	p, err := ParseProfile(s)
	if err != nil {
		panic(err)
	}
	return p
}

// String formats the profile. For a Profile returned by ParseProfile it is the parsed string.
func (p Profile) String() string {
	var b strings.Builder
	if p.C != 0 {
		b.WriteString(strconv.Itoa(p.C))
		b.WriteString("c.")
	}
	b.WriteString(strconv.Itoa(p.G))
	b.WriteString("g.")
	b.WriteString(strconv.Itoa(p.GB))
	b.WriteString("gb")
	if len(p.Attributes) > 0 {
		b.WriteByte('+')
		b.WriteString(strings.Join(p.Attributes, ","))
	} else if len(p.NegAttributes) > 0 {
		b.WriteByte('-')
		b.WriteString(strings.Join(p.NegAttributes, ","))
	}
	return b.String()
}

// ComputeSlices returns the compute-slice count of the compute instance (C, or G when C is 0).
func (p Profile) ComputeSlices() int {
	if p.C == 0 {
		return p.G
	}
	return p.C
}

// IsComputeInstance reports whether the profile names a compute instance smaller than its GPU
// instance ("1c.3g.20gb").
func (p Profile) IsComputeInstance() bool { return p.C != 0 && p.C != p.G }

// GPUInstance returns the GPU-instance profile: the same profile with no "c" field.
func (p Profile) GPUInstance() Profile {
	p.C = 0
	p.Attributes = slices.Clone(p.Attributes)
	p.NegAttributes = slices.Clone(p.NegAttributes)
	return p
}

// Canonical returns the profile in canonical form: "c" dropped when it equals "g", attributes sorted.
func (p Profile) Canonical() Profile {
	if p.C == p.G {
		p.C = 0
	}
	p.Attributes = slices.Sorted(slices.Values(p.Attributes))
	p.NegAttributes = slices.Sorted(slices.Values(p.NegAttributes))
	return p
}

// HasAttribute reports whether the profile has the "+" attribute a.
func (p Profile) HasAttribute(a string) bool { return slices.Contains(p.Attributes, a) }

// HasNegAttribute reports whether the profile has the "-" attribute a.
func (p Profile) HasNegAttribute(a string) bool { return slices.Contains(p.NegAttributes, a) }

// Equal reports whether p and q name the same profile: the same slice counts and memory, with
// "c" equal to "g" the same as no "c", and the same attribute sets in any order.
func (p Profile) Equal(q Profile) bool {
	a, b := p.Canonical(), q.Canonical()
	return a.C == b.C && a.G == b.G && a.GB == b.GB &&
		slices.Equal(a.Attributes, b.Attributes) && slices.Equal(a.NegAttributes, b.NegAttributes)
}

// mediaClass classifies a GPU-instance profile for media-engine exclusivity.
type mediaClass int

const (
	mediaPlain mediaClass = iota // no media suffix
	mediaME                      // "+me": takes the GPU's single set of JPEG/OFA engines
	mediaAllME                   // "+me.all": all media engines, blocks everything but "-me"
	mediaNoME                    // "-me": no media engines
)

func (p Profile) mediaClass() mediaClass {
	switch {
	case p.HasAttribute(AttributeMediaExtensionsAll):
		return mediaAllME
	case p.HasAttribute(AttributeMediaExtensions):
		return mediaME
	case p.HasNegAttribute(AttributeMediaExtensions):
		return mediaNoME
	}
	return mediaPlain
}
