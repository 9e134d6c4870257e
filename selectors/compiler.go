package selectors

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	celgo "github.com/google/cel-go/cel"
	"github.com/gpudra/gpudra/selectors/internal/text"
	resourceapi "k8s.io/api/resource/v1"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/lru"
)

// DefaultCacheSize is how many compiled selectors a Compiler keeps (least recently used first
// out). The scheduler's own cache holds 10,000 expressions.
const DefaultCacheSize = 1000

// celCompiler is the part of k8s.io/dynamic-resource-allocation/cel's compiler that a Compiler
// uses (its concrete type is unexported upstream).
type celCompiler interface {
	CompileCELExpression(expression string, options dracel.Options) dracel.CompilationResult
}

// Compiler compiles device selectors in the CEL environment of the Kubernetes DRA API and
// evaluates them against devices the way kube-scheduler does. Compiled selectors are cached.
// A Compiler is safe for concurrent use.
type Compiler struct {
	celFeatures dracel.Features
	costLimit   uint64
	cacheSize   int

	compiler celCompiler

	mu    sync.Mutex
	cache *lru.Cache

	envOnce sync.Once
	newEnv  *celgo.Env // the environment the API server validates new objects in
}

// CompilerOption configures a Compiler.
type CompilerOption func(*Compiler)

// defaultCELFeatures are the CEL features of a Kubernetes 1.37 scheduler with its default
// feature gates: those its default allocator features imply (ConsumableCapacity is on,
// ListTypeAttributes is off). Package selectors/check's DefaultFeatures are the allocator
// features themselves; a test there keeps the two in agreement.
func defaultCELFeatures() dracel.Features {
	return dracel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: false}
}

// WithCELFeatures replaces the default CEL features, those of a Kubernetes 1.37 scheduler with
// its default feature gates (NewCompiler().CELFeatures()). They decide which CEL environment
// selectors compile in: EnableConsumableCapacity adds device.allowMultipleAllocations,
// EnableListTypeAttributes adds list-valued attributes and includes(). For the CEL features of
// an allocator's features (structured.Features), use selectors/check's CELFeatures.
func WithCELFeatures(f dracel.Features) CompilerOption {
	return func(c *Compiler) { c.celFeatures = f }
}

// WithCostLimit replaces the API server's limit on the estimated cost of one new selector
// (resourceapi.CELSelectorExpressionMaxCost, 1,000,000) in Compile's validation. It does not
// change evaluation: the scheduler aborts every selector whose actual cost exceeds
// resourceapi.CELSelectorExpressionMaxCost, whatever limit the expression was validated
// against, and Selector.Matches does the same.
func WithCostLimit(limit uint64) CompilerOption {
	return func(c *Compiler) { c.costLimit = limit }
}

// WithCacheSize sets how many compiled selectors are kept (default DefaultCacheSize).
func WithCacheSize(n int) CompilerOption {
	return func(c *Compiler) { c.cacheSize = n }
}

// NewCompiler returns a Compiler for the CEL environment of a Kubernetes 1.37 API server and
// scheduler.
func NewCompiler(opts ...CompilerOption) *Compiler {
	c := &Compiler{
		celFeatures: defaultCELFeatures(),
		costLimit:   resourceapi.CELSelectorExpressionMaxCost,
		cacheSize:   DefaultCacheSize,
	}
	for _, o := range opts {
		o(c)
	}
	if c.cacheSize < 1 {
		c.cacheSize = 1
	}
	c.compiler = dracel.GetCompiler(c.celFeatures)
	c.cache = lru.New(c.cacheSize)
	return c
}

// CELFeatures returns the CEL features the Compiler was built for.
func (c *Compiler) CELFeatures() dracel.Features { return c.celFeatures }

// Selector is a compiled device selector.
type Selector struct {
	// Expression is the CEL source.
	Expression string
	// Cost is the estimated worst-case cost in CEL cost units, as the API server computes it
	// when it validates a new object; 0 for a selector from CompileStored, whose cost the
	// scheduler does not estimate.
	Cost uint64

	// program is compiled as the scheduler's cel.Cache compiles it: stored-expression
	// environment, runtime cost limit, interrupt checks.
	program dracel.CompilationResult
}

// Compile compiles a device selector as the API server validates it in a new object (length,
// syntax, types, result type, estimated cost against the limit) and prepares it for evaluation
// the way the scheduler compiles it. Errors are *CompileError values. Results, including
// errors, are cached by expression.
func (c *Compiler) Compile(expression string) (*Selector, error) {
	c.mu.Lock()
	v, ok := c.cache.Get(expression)
	c.mu.Unlock()
	if ok {
		r := v.(compiled)
		return r.sel, r.err
	}
	sel, err := c.compile(expression)
	c.mu.Lock()
	c.cache.Add(expression, compiled{sel, err})
	c.mu.Unlock()
	return sel, err
}

type compiled struct {
	sel *Selector
	err error
}

// storedKey is the cache key of an expression compiled by CompileStored; a NUL cannot start a
// selector the API accepts, so the two kinds of entries never collide.
const storedKey = "\x00stored:"

// CompileStored compiles a selector the way the scheduler compiles one that is already stored
// in the cluster (k8s.io/dynamic-resource-allocation/cel.Cache.GetOrCompile): in the CEL
// environment of stored expressions, without the API server's checks of a new object (length,
// estimated cost). Use it to evaluate what a cluster holds — an expression stored by an older
// API server, or under a feature its environment has since dropped — exactly as the scheduler
// does; use Compile for what is about to be written. Errors are *CompileError values; results
// are cached.
func (c *Compiler) CompileStored(expression string) (*Selector, error) {
	c.mu.Lock()
	v, ok := c.cache.Get(storedKey + expression)
	c.mu.Unlock()
	if ok {
		r := v.(compiled)
		return r.sel, r.err
	}
	var sel *Selector
	prog, err := c.storedProgram(expression)
	if err == nil {
		sel = &Selector{Expression: expression, program: prog}
	}
	c.mu.Lock()
	c.cache.Add(storedKey+expression, compiled{sel, err})
	c.mu.Unlock()
	return sel, err
}

// storedProgram compiles the expression with the options of the scheduler's cel.Cache: the
// stored-expression environment, no cost estimation, and the default runtime cost limit
// (resourceapi.CELSelectorExpressionMaxCost) with interrupt checks. No option of the Compiler
// changes the runtime limit: the scheduler has none either.
func (c *Compiler) storedProgram(expression string) (dracel.CompilationResult, error) {
	stored := environment.StoredExpressions
	prog := c.compiler.CompileCELExpression(expression, dracel.Options{EnvType: &stored, DisableCostEstimation: true})
	if prog.Error != nil {
		return prog, c.compileError(expression, prog.Error)
	}
	return prog, nil
}

func (c *Compiler) compile(expression string) (*Selector, error) {
	if len(expression) > resourceapi.CELSelectorExpressionMaxLength {
		return nil, &CompileError{Expression: expression, Kind: ErrorTooLong,
			Issues: []Issue{{Message: fmt.Sprintf("expression is %d bytes long, the API allows at most %d", len(expression), resourceapi.CELSelectorExpressionMaxLength)}}}
	}
	newExprs := environment.NewExpressions
	validated := c.compiler.CompileCELExpression(expression, dracel.Options{EnvType: &newExprs, CostLimit: &c.costLimit})
	if validated.Error != nil {
		return nil, c.compileError(expression, validated.Error)
	}
	if validated.MaxCost > c.costLimit {
		return nil, &CompileError{Expression: expression, Kind: ErrorTooExpensive, Cost: validated.MaxCost, Limit: c.costLimit,
			Issues: []Issue{{Message: fmt.Sprintf("estimated cost %d exceeds the limit %d (the API server rejects it as too complex)", validated.MaxCost, c.costLimit)}}}
	}
	prog, err := c.storedProgram(expression)
	if err != nil {
		return nil, err
	}
	return &Selector{Expression: expression, Cost: validated.MaxCost, program: prog}, nil
}

// compileError turns an upstream error into a CompileError with the positions cel-go reports.
func (c *Compiler) compileError(expression string, e *apiservercel.Error) *CompileError {
	ce := &CompileError{Expression: expression, Kind: ErrorInvalid}
	if e.Type == apiservercel.ErrorTypeInternal {
		ce.Kind = ErrorInternal
	}
	if env := c.validationEnv(); env != nil {
		if _, iss := env.Compile(expression); iss != nil && iss.Err() != nil {
			for _, ie := range iss.Errors() {
				loc := ie.Location
				ce.Issues = append(ce.Issues, Issue{Line: loc.Line(), Column: loc.Column() + 1, Message: ie.Message})
			}
		}
	}
	if len(ce.Issues) == 0 {
		// Not a syntax or type error: the result type, or an internal problem.
		ce.Issues = []Issue{{Message: strings.TrimPrefix(e.Detail, "compilation failed: ")}}
	}
	return ce
}

// validationEnv is the CEL environment the API server validates new selectors in, taken from a
// successful compilation (the upstream compiler does not expose it otherwise).
func (c *Compiler) validationEnv() *celgo.Env {
	c.envOnce.Do(func() {
		newExprs := environment.NewExpressions
		r := c.compiler.CompileCELExpression("true", dracel.Options{EnvType: &newExprs, DisableCostEstimation: true})
		c.newEnv = r.Environment
	})
	return c.newEnv
}

// ErrorKind classifies a CompileError.
type ErrorKind string

const (
	// ErrorInvalid is a syntax or type error, or a result that is not a bool.
	ErrorInvalid ErrorKind = "Invalid"
	// ErrorTooLong is an expression longer than resourceapi.CELSelectorExpressionMaxLength.
	ErrorTooLong ErrorKind = "TooLong"
	// ErrorTooExpensive is an expression whose estimated cost exceeds the limit.
	ErrorTooExpensive ErrorKind = "TooExpensive"
	// ErrorInternal is a problem of the CEL environment, not of the expression.
	ErrorInternal ErrorKind = "Internal"
)

// Issue is one problem in an expression. Line and Column are 1-based; both are 0 when the
// problem has no position (for example a result of the wrong type).
type Issue struct {
	// Line is the 1-based line of the problem in the expression, 0 when it has no position.
	Line int `json:"line,omitempty"`
	// Column is the 1-based column of the problem in its line, 0 when it has no position.
	Column int `json:"column,omitempty"`
	// Message is cel-go's (or the API server's) description of the problem.
	Message string `json:"message"`
}

// String formats the issue as "line:column: message".
func (i Issue) String() string {
	if i.Line == 0 {
		return i.Message
	}
	return fmt.Sprintf("%d:%d: %s", i.Line, i.Column, i.Message)
}

// CompileError says why an expression is not a valid device selector.
type CompileError struct {
	// Expression is the expression as given.
	Expression string
	// Kind classifies the error.
	Kind ErrorKind
	// Issues are the problems found, at least one.
	Issues []Issue
	// Cost and Limit are set for ErrorTooExpensive: the estimated cost and the limit it
	// exceeds.
	Cost, Limit uint64
}

// Error implements error.
func (e *CompileError) Error() string {
	msgs := make([]string, len(e.Issues))
	for i, iss := range e.Issues {
		msgs[i] = iss.String()
	}
	return fmt.Sprintf("CEL selector %q: %s", text.Abbreviate(e.Expression, 80), strings.Join(msgs, "; "))
}

// AsCompileError returns the *CompileError in err's chain, or nil.
func AsCompileError(err error) *CompileError {
	var ce *CompileError
	if errors.As(err, &ce) {
		return ce
	}
	return nil
}
