package signature

import (
	"context"
	"fmt"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
)

// A condition is a CEL expression over an attestation's statement, with
// the variables predicate (the predicate as JSON: maps, lists, strings,
// numbers, booleans), predicateType and subject (the statement's
// subjects, each {name, digest}). CEL, as Kubernetes' validation rules
// and Kyverno use it, because it cannot loop, call out or run for long:
// every evaluation is also bounded by conditionCost.

// conditionCost bounds one evaluation (CEL's cost units, about one per
// value visited): enough for a scan report's summary or a walk over a few
// thousand findings, not for a hostile predicate to pin a core.
const conditionCost = 1_000_000

var conditionEnv = func() *cel.Env {
	env, err := cel.NewEnv(
		cel.Variable("predicate", cel.DynType),
		cel.Variable("predicateType", cel.StringType),
		cel.Variable("subject", cel.ListType(cel.DynType)),
		// JSON numbers are doubles; predicate.x.critical == 0 and < 1
		// mean what they say.
		cel.CrossTypeNumericComparisons(true),
	)
	if err != nil {
		panic(err)
	}
	return env
}()

type condition struct {
	expr string
	prg  cel.Program
}

// compileCondition parses and type-checks expr; it must be a boolean.
func compileCondition(expr string) (condition, error) {
	ast, iss := conditionEnv.Compile(expr)
	if iss.Err() != nil {
		return condition{}, fmt.Errorf("%q: %v", expr, iss.Err())
	}
	if t := ast.OutputType(); t != cel.BoolType && t != cel.DynType {
		return condition{}, fmt.Errorf("%q is a %s, not a bool", expr, t)
	}
	prg, err := conditionEnv.Program(ast, cel.CostLimit(conditionCost), cel.InterruptCheckFrequency(100))
	if err != nil {
		return condition{}, fmt.Errorf("%q: %v", expr, err)
	}
	return condition{expr: expr, prg: prg}, nil
}

// holds evaluates the condition; an expression that does not evaluate
// (a field the predicate lacks, a cost above the bound) does not hold.
func (c condition) holds(ctx context.Context, st statement) error {
	out, _, err := c.prg.ContextEval(ctx, map[string]any{
		"predicate":     st.predicate,
		"predicateType": st.predicateType,
		"subject":       st.subject,
	})
	if err != nil {
		return fmt.Errorf("condition %s could not be evaluated: %v", c.expr, err)
	}
	if out != types.True {
		return fmt.Errorf("condition %s is %v", c.expr, out)
	}
	return nil
}
