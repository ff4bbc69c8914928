package master

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/internal/echo"
	"github.com/shardfence/shardfence/internal/grpcprobe"
)

// HealthChecker answers the gRPC health checking protocol for a master.
// Service names:
//
//	""                                        the process: SERVING until it shuts down (a liveness probe)
//	"shardfence.master.v1.MasterService"      SERVING while this master serves the object and fleet APIs
//	"shardfence.master.v1.MasterFleetService" (the primary, holding its term and lease); NOT_SERVING otherwise
//	"shardfence.master.v1.MasterHAService"    /readyz: a ready primary, or a standby within its lag
//
// serving is nil while this master serves the APIs; ready is /readyz's
// verdict. stopped closes when the master shuts down.
func HealthChecker(serving, ready func() error, stopped <-chan struct{}) grpcprobe.Checker {
	up := func(err error) grpchealth.Status {
		if err != nil {
			return grpchealth.StatusNotServing
		}
		return grpchealth.StatusServing
	}
	return grpcprobe.Checker{Stopped: stopped, Status: func(_ context.Context, svc string) (grpchealth.Status, error) {
		switch svc {
		case "":
			select {
			case <-stopped:
				return grpchealth.StatusNotServing, nil
			default:
				return grpchealth.StatusServing, nil
			}
		case masterv1connect.MasterServiceName, masterv1connect.MasterFleetServiceName:
			if err := serving(); err != nil {
				return grpchealth.StatusNotServing, nil
			}
			return up(ready()), nil
		case masterv1connect.MasterHAServiceName:
			return up(ready()), nil
		}
		return grpchealth.StatusUnknown, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown health service %q: ask for \"\" (the process), %q, %q or %q",
			echo.Clip(svc), masterv1connect.MasterServiceName, masterv1connect.MasterFleetServiceName, masterv1connect.MasterHAServiceName))
	}}
}
