package driver

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestCleanupOrderAndErrors(t *testing.T) {
	var order []string
	var c Cleanup
	step := func(name string, err error) {
		c.Add(name, func(context.Context) error { order = append(order, name); return err })
	}
	step("first", nil)
	step("second", errors.New("boom"))
	step("third", nil)
	err := c.Clean(context.Background())
	if want := []string{"third", "second", "first"}; !reflect.DeepEqual(order, want) {
		t.Errorf("clean ran %q, want %q", order, want)
	}
	if err == nil || !strings.Contains(err.Error(), "second: boom") {
		t.Errorf("clean() = %v, want the failing step named", err)
	}
	order = nil
	if err := c.Clean(context.Background()); err != nil || len(order) != 0 {
		t.Errorf("second clean() = %v after running %q, want nothing run", err, order)
	}
}

func TestCleanupRelease(t *testing.T) {
	ran := 0
	var c Cleanup
	c.Add("x", func(context.Context) error { ran++; return nil })
	owned := c.Release()
	if err := c.Clean(context.Background()); err != nil || ran != 0 {
		t.Errorf("clean() after release = %v, ran %d steps, want nothing", err, ran)
	}
	var outer Cleanup
	outer.Merge(owned)
	if err := outer.Clean(context.Background()); err != nil || ran != 1 {
		t.Errorf("clean() of the merged stack = %v, ran %d steps, want 1", err, ran)
	}
}
