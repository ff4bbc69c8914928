package client

import (
	"errors"
	"testing"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

func TestChooseThePrimary(t *testing.T) {
	primary := masterv1.MasterRole_MASTER_ROLE_PRIMARY
	standby := masterv1.MasterRole_MASTER_ROLE_STANDBY
	down := errors.New("connection refused")
	m2 := Leader{Node: "m2", Addr: "http://adv-m2", Term: 3}
	for _, c := range []struct {
		name    string
		answers []Answer
		want    Primary
		ok      bool
	}{
		{"the primary answers for itself, at the address asked", []Answer{
			{Addr: "http://a", HA: true, Role: standby, Leader: m2},
			{Addr: "http://b", HA: true, Role: primary, Leader: m2},
		}, Primary{Addr: "http://b", Leader: m2, Confirmed: true}, true},
		{"only standbys answer: the address their leader entry names", []Answer{
			{Addr: "http://a", HA: true, Role: standby, Leader: m2},
			{Addr: "http://b", Err: down},
		}, Primary{Addr: "http://adv-m2", Leader: m2}, true},
		{"the newest term wins among hints", []Answer{
			{Addr: "http://a", HA: true, Role: standby, Leader: Leader{Node: "m1", Addr: "http://adv-m1", Term: 2}},
			{Addr: "http://b", HA: true, Role: standby, Leader: m2},
		}, Primary{Addr: "http://adv-m2", Leader: m2}, true},
		{"a primary whose lease lapsed names nobody", []Answer{
			{Addr: "http://a", HA: true, Role: primary},
			{Addr: "http://b", HA: true, Role: standby},
		}, Primary{}, false},
		{"a master without a store is the only one", []Answer{
			{Addr: "http://a", Role: masterv1.MasterRole_MASTER_ROLE_IN_MEMORY},
		}, Primary{Addr: "http://a", Confirmed: true}, true},
		{"nobody answers", []Answer{{Addr: "http://a", Err: down}}, Primary{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := Choose(c.answers)
			if ok != c.ok || got != c.want {
				t.Fatalf("Choose = %+v, %v; want %+v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}
