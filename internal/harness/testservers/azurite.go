package testservers

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Azurite's development account, published by Microsoft for every emulator
// install; it protects nothing.
const (
	AzuriteAccount = "devstoreaccount1"
	AzuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// AzuriteContainer is the container every Azurite server starts with.
const AzuriteContainer = "shardfence-test"

// Azurite is an azurite-blob process on 127.0.0.1, in memory.
type Azurite struct {
	Proc *Process
	// Endpoint is the blob service URL, path-style with the account:
	// http://127.0.0.1:PORT/devstoreaccount1.
	Endpoint  string
	Container string
}

// StartAzurite starts azurite-blob (from `make tools`) for the test, with
// AzuriteContainer created, and stops it when the test ends. Without the
// binary the test is skipped, or fails under CI.
func StartAzurite(t testing.TB) *Azurite {
	t.Helper()
	bin, err := Tool("azurite-blob")
	if err != nil {
		Unavailable(t, "Azurite", err)
		return nil
	}
	port, err := FreePort()
	if err != nil {
		Unavailable(t, "Azurite", err)
		return nil
	}
	endpoint := "http://127.0.0.1:" + strconv.Itoa(port) + "/" + AzuriteAccount
	args := []string{
		"--blobHost", "127.0.0.1", "--blobPort", strconv.Itoa(port),
		// In memory, so nothing lands on disk; Azurite refuses --location
		// together with --inMemoryPersistence.
		"--inMemoryPersistence", "--skipApiVersionCheck", "--disableTelemetry",
	}
	// Any HTTP answer (Azurite says 400 to a bare GET) means it serves.
	p, err := Start(t, "azurite-blob", bin, args, nil, HTTPReady(endpoint), 2*time.Minute)
	if err != nil {
		Unavailable(t, "Azurite", err)
		return nil
	}
	a := &Azurite{Proc: p, Endpoint: endpoint, Container: AzuriteContainer}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.CreateContainer(ctx, AzuriteContainer); err != nil {
		t.Fatalf("Azurite: %v", err)
	}
	return a
}

// CreateContainer creates a container; one that exists already is fine.
func (a *Azurite) CreateContainer(ctx context.Context, name string) error {
	cred, err := container.NewSharedKeyCredential(AzuriteAccount, AzuriteKey)
	if err != nil {
		return err
	}
	c, err := container.NewClientWithSharedKeyCredential(a.Endpoint+"/"+name, cred, nil)
	if err != nil {
		return err
	}
	_, err = c.Create(ctx, nil)
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.ErrorCode == "ContainerAlreadyExists" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create container %q: %w", name, err)
	}
	return nil
}

// StoreURL is an azblob:// URL for prefix in the server's container. The
// shared key goes in the environment, never in the URL: see Env.
func (a *Azurite) StoreURL(prefix string) string {
	return "azblob://" + AzuriteAccount + "/" + a.Container + "/" + prefix + "?" + url.Values{"endpoint": {a.Endpoint}}.Encode()
}

// SetEnv gives the test the development account's credentials the way a
// user gives real ones, through AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY.
// It uses t.Setenv, so the test must not run in parallel.
func (a *Azurite) SetEnv(t testing.TB) {
	t.Setenv("AZURE_STORAGE_ACCOUNT", AzuriteAccount)
	t.Setenv("AZURE_STORAGE_KEY", AzuriteKey)
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_SAS_TOKEN", "")
}
