//! Every function's SDK clients have operation and attempt timeouts.

use payments_config::{SDK_ATTEMPT_TIMEOUT, SDK_OPERATION_TIMEOUT, sdk_config};

#[tokio::test]
async fn the_sdk_config_bounds_each_operation_and_attempt() {
    let sdk = sdk_config().await;
    let timeouts = sdk.timeout_config().expect("a timeout config");
    assert_eq!(timeouts.operation_timeout(), Some(SDK_OPERATION_TIMEOUT));
    assert_eq!(
        timeouts.operation_attempt_timeout(),
        Some(SDK_ATTEMPT_TIMEOUT)
    );
    assert!(SDK_ATTEMPT_TIMEOUT < SDK_OPERATION_TIMEOUT);
}
