package apiserver

import (
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/goofy-capi/cluster-api-provider-goofy/internal/kinds"
)

// tableOptions reads includeObject and noHeaders like upstream.
func tableOptions(r *http.Request) (*metav1.TableOptions, error) {
	opts := &metav1.TableOptions{}
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(r.URL.Query(), metav1.SchemeGroupVersion, opts); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if errs := metav1validation.ValidateTableOptions(opts); len(errs) > 0 {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("Unable to convert to Table as requested: %v", errs.ToAggregate()))
	}
	return opts, nil
}

// toTable converts an object or a list of them into a meta.k8s.io Table.
func toTable(rq *reqScope, obj runtime.Object, opts *metav1.TableOptions, gv schema.GroupVersion, noHeaders bool) (*metav1.Table, error) {
	ri, p := rq.ri, rq.printer
	if p.Cells == nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("no printer for %v", ri.GVR))
	}
	t := &metav1.Table{}
	t.SetGroupVersionKind(gv.WithKind("Table"))
	if !noHeaders && !opts.NoHeaders {
		t.ColumnDefinitions = p.Columns
	}
	addRow := func(item runtime.Object) error {
		row := metav1.TableRow{Cells: safeCells(p, item)}
		switch opts.IncludeObject {
		case metav1.IncludeNone:
		case metav1.IncludeObject:
			item.GetObjectKind().SetGroupVersionKind(ri.GVK())
			row.Object.Object = item
		default:
			pm, err := partialMetadata(item, gv)
			if err != nil {
				return err
			}
			row.Object.Object = pm
		}
		t.Rows = append(t.Rows, row)
		return nil
	}
	if meta.IsListType(obj) {
		if li, err := meta.ListAccessor(obj); err == nil {
			t.ResourceVersion = li.GetResourceVersion()
			t.Continue = li.GetContinue()
			t.RemainingItemCount = li.GetRemainingItemCount()
		}
		t.Rows = []metav1.TableRow{}
		if err := meta.EachListItem(obj, addRow); err != nil {
			return nil, err
		}
		return t, nil
	}
	if m, err := meta.Accessor(obj); err == nil {
		t.ResourceVersion = m.GetResourceVersion()
	}
	if err := addRow(obj); err != nil {
		return nil, err
	}
	return t, nil
}

// safeCells falls back to the generic columns' values if an object is not of the printer's
// Go type (never expected, but a Table must not panic the server).
func safeCells(p kinds.Printer, o runtime.Object) (cells []any) {
	defer func() {
		if recover() != nil {
			cells = make([]any, len(p.Columns))
			for i := range cells {
				cells[i] = ""
			}
		}
	}()
	return p.Cells(o)
}
