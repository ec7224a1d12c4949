//! A hook into payment-processor's invocations when the functions run in process: a test takes
//! an invocation over (to crash it in the middle, say) and lets the others run as deployed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use futures_util::future::BoxFuture;
use lambda_runtime::LambdaEvent;

use super::{BoxError, Pipeline, Running, settings};

/// What an invocation taken over by a [`ProcessorHook`] answers the event source mapping.
pub type Hooked = BoxFuture<'static, Result<SqsBatchResponse, lambda_runtime::Error>>;

/// Called with each invocation of payment-processor before its handler: `Some` takes the
/// invocation over (the handler does not run, and its batch counts are not added), `None` lets
/// the handler run.
pub type ProcessorHook = Arc<dyn Fn(&LambdaEvent<SqsEvent>) -> Option<Hooked> + Send + Sync>;

/// The hook in place, if any, shared with the running handler.
pub(super) type HookSlot = Arc<Mutex<Option<ProcessorHook>>>;

/// The invocation as the hook in `slot` takes it over, if it does.
pub(super) fn take_over(slot: &HookSlot, event: &LambdaEvent<SqsEvent>) -> Option<Hooked> {
    let hook = slot.lock().unwrap_or_else(|e| e.into_inner()).clone()?;
    hook(event)
}

impl Pipeline {
    /// Puts `hook` in front of payment-processor's handler, from its next invocation on.
    /// Only when the functions run in process (an error otherwise).
    pub fn set_processor_hook(&self, hook: ProcessorHook) -> Result<(), BoxError> {
        let Running::InProcess { hook: slot, .. } = &self.running else {
            return Err("a processor hook needs the functions in process".into());
        };
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(hook);
        Ok(())
    }

    /// The SDK configuration the functions were built from (the local endpoint's).
    pub fn sdk(&self) -> &aws_config::SdkConfig {
        &self.sdk
    }

    /// `function`'s environment as the template sets it for this run.
    pub fn function_settings(&self, function: &str) -> Result<HashMap<String, String>, BoxError> {
        settings(&self.resources, &self.template, function)
    }
}
