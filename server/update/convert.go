package update

import (
	eksv1 "github.com/saltbush/saltbush/api/saltbush/eks/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
)

// StatusName is the EKS name of an update status.
func StatusName(st storagev1.UpdateStatus) string {
	switch st {
	case storagev1.UpdateStatus_UPDATE_STATUS_IN_PROGRESS:
		return "InProgress"
	case storagev1.UpdateStatus_UPDATE_STATUS_FAILED:
		return "Failed"
	case storagev1.UpdateStatus_UPDATE_STATUS_CANCELLED:
		return "Cancelled"
	case storagev1.UpdateStatus_UPDATE_STATUS_SUCCESSFUL:
		return "Successful"
	}
	return ""
}

// CancellationStatusName is the EKS name of a cancellation status.
func CancellationStatusName(st storagev1.CancellationStatus) string {
	switch st {
	case storagev1.CancellationStatus_CANCELLATION_STATUS_IN_PROGRESS:
		return "InProgress"
	case storagev1.CancellationStatus_CANCELLATION_STATUS_FAILED:
		return "Failed"
	case storagev1.CancellationStatus_CANCELLATION_STATUS_SUCCESSFUL:
		return "Successful"
	}
	return ""
}

// ToAPI renders an update record in AWS's shape.
func ToAPI(u *storagev1.UpdateRecord) *eksv1.Update {
	out := &eksv1.Update{
		Id:     u.GetId(),
		Status: StatusName(u.GetStatus()),
		Type:   u.GetType(),
		Params: []*eksv1.UpdateParam{},
		Errors: []*eksv1.ErrorDetail{},
	}
	if t := u.GetCreatedAt(); t != nil {
		out.CreatedAt = float64(t.AsTime().UnixMilli()) / 1000
	}
	for _, p := range u.GetParams() {
		out.Params = append(out.Params, &eksv1.UpdateParam{Type: p.GetType(), Value: p.GetValue()})
	}
	for _, e := range u.GetErrors() {
		out.Errors = append(out.Errors, &eksv1.ErrorDetail{
			ErrorCode:    e.GetErrorCode(),
			ErrorMessage: e.GetErrorMessage(),
			ResourceIds:  e.GetResourceIds(),
		})
	}
	if c := u.GetCancellation(); c != nil {
		out.Cancellation = &eksv1.Cancellation{Status: CancellationStatusName(c.GetStatus()), Reason: c.GetReason()}
	}
	return out
}
