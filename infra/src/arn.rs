//! ARNs: reading the parts of one ([`Arn::parse`]) and writing the ones the harness makes
//! (tables, queues, functions, log groups, roles) with [`Arn`]'s `Display`.
//!
//! ```
//! use local_aws::arn::Arn;
//!
//! let queue = Arn::parse("arn:aws:sqs:eu-west-1:111122223333:payments.fifo").unwrap();
//! assert_eq!((queue.region, queue.account, queue.resource), ("eu-west-1", "111122223333", "payments.fifo"));
//! // The function beside it, and another queue of the same account and region.
//! assert_eq!(queue.function("payment-processor"),
//!            "arn:aws:lambda:eu-west-1:111122223333:function:payment-processor");
//! assert_eq!(queue.with_resource("payments-dlq.fifo"),
//!            "arn:aws:sqs:eu-west-1:111122223333:payments-dlq.fifo");
//! assert!(Arn::parse("payments.fifo").is_err());
//! ```

use std::fmt;

/// An ARN that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArnError {
    /// It does not start with `arn:`.
    #[error("{arn:?} is not an ARN: it does not start with \"arn:\"")]
    NotAnArn {
        /// What was given.
        arn: String,
    },
    /// It has fewer than the six `:`-separated parts of an ARN.
    #[error(
        "{arn:?} has {parts} of the 6 parts of an ARN (arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE)"
    )]
    TooShort {
        /// What was given.
        arn: String,
        /// How many parts it has.
        parts: usize,
    },
}

/// The parts of an ARN, `arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE` (the resource may
/// hold `:` and `/`). `Display` writes it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arn<'a> {
    /// `aws`, `aws-cn`, ...
    pub partition: &'a str,
    /// `sqs`, `dynamodb`, `lambda`, ...
    pub service: &'a str,
    /// The region (empty for global services such as IAM).
    pub region: &'a str,
    /// The account id.
    pub account: &'a str,
    /// The rest: `payments.fifo`, `table/payments/stream/...`, `function:name`.
    pub resource: &'a str,
}

impl<'a> Arn<'a> {
    /// Splits `arn` into its parts.
    ///
    /// ```
    /// use local_aws::arn::{Arn, ArnError};
    ///
    /// let stream = Arn::parse("arn:aws:dynamodb:us-east-1:1:table/t/stream/2024").unwrap();
    /// assert_eq!(stream.resource, "table/t/stream/2024");
    /// assert_eq!(stream.table_name(), Some("t"));
    /// assert!(matches!(Arn::parse("arn:aws:sqs"), Err(ArnError::TooShort { parts: 3, .. })));
    /// ```
    pub fn parse(arn: &'a str) -> Result<Self, ArnError> {
        let mut parts = arn.splitn(6, ':');
        if parts.next() != Some("arn") {
            return Err(ArnError::NotAnArn {
                arn: arn.to_owned(),
            });
        }
        match (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) {
            (Some(partition), Some(service), Some(region), Some(account), Some(resource)) => {
                Ok(Self {
                    partition,
                    service,
                    region,
                    account,
                    resource,
                })
            }
            _ => Err(ArnError::TooShort {
                arn: arn.to_owned(),
                parts: arn.split(':').count(),
            }),
        }
    }

    /// An ARN of `service` in `partition`, `region` and `account`.
    pub fn new(
        partition: &'a str,
        service: &'a str,
        region: &'a str,
        account: &'a str,
        resource: &'a str,
    ) -> Self {
        Self {
            partition,
            service,
            region,
            account,
            resource,
        }
    }

    /// The same ARN naming `resource` instead: queue ARNs of one account and region differ
    /// only in the name.
    pub fn with_resource(&self, resource: &str) -> String {
        Arn { resource, ..*self }.to_string()
    }

    /// The ARN of the Lambda function `name` in this ARN's partition, region and account.
    pub fn function(&self, name: &str) -> String {
        function(self.partition, self.region, self.account, name)
    }

    /// The table a DynamoDB table, index or stream ARN names (`table/NAME[/...]`).
    pub fn table_name(&self) -> Option<&'a str> {
        self.resource.strip_prefix("table/")?.split('/').next()
    }
}

impl fmt::Display for Arn<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arn:{}:{}:{}:{}:{}",
            self.partition, self.service, self.region, self.account, self.resource
        )
    }
}

/// The ARN of the Lambda function `name`.
///
/// ```
/// assert_eq!(local_aws::arn::function("aws", "us-east-1", "1", "f"), "arn:aws:lambda:us-east-1:1:function:f");
/// ```
pub fn function(partition: &str, region: &str, account: &str, name: &str) -> String {
    Arn::new(
        partition,
        "lambda",
        region,
        account,
        &format!("function:{name}"),
    )
    .to_string()
}

/// The ARN of the DynamoDB table `name`.
///
/// ```
/// assert_eq!(local_aws::arn::table("aws", "us-east-1", "1", "t"), "arn:aws:dynamodb:us-east-1:1:table/t");
/// ```
pub fn table(partition: &str, region: &str, account: &str, name: &str) -> String {
    Arn::new(
        partition,
        "dynamodb",
        region,
        account,
        &format!("table/{name}"),
    )
    .to_string()
}

/// The ARN of the SQS queue `name`.
///
/// ```
/// assert_eq!(local_aws::arn::queue("aws", "us-east-1", "1", "q.fifo"), "arn:aws:sqs:us-east-1:1:q.fifo");
/// ```
pub fn queue(partition: &str, region: &str, account: &str, name: &str) -> String {
    Arn::new(partition, "sqs", region, account, name).to_string()
}

/// The region of `arn`, empty when it is not an ARN (what Lambda events carry as `awsRegion`).
///
/// ```
/// assert_eq!(local_aws::arn::region("arn:aws:sqs:eu-west-1:1:q"), "eu-west-1");
/// assert_eq!(local_aws::arn::region("q"), "");
/// ```
pub fn region(arn: &str) -> &str {
    Arn::parse(arn).map_or("", |a| a.region)
}

/// The ARN of the function `name` beside the resource `arn` (its partition, region and
/// account; partition `aws` and empty region and account when `arn` is not an ARN).
///
/// ```
/// assert_eq!(local_aws::arn::function_beside("arn:aws:sqs:eu-west-1:1:q", "f"),
///            "arn:aws:lambda:eu-west-1:1:function:f");
/// assert_eq!(local_aws::arn::function_beside("q", "f"), "arn:aws:lambda:::function:f");
/// ```
pub fn function_beside(arn: &str, name: &str) -> String {
    match Arn::parse(arn) {
        Ok(a) => a.function(name),
        Err(_) => function("aws", "", "", name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing_and_writing_back_round_trip() {
        for arn in [
            "arn:aws:sqs:us-east-1:123456789012:payments.fifo",
            "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2024-01-01T00:00:00.000",
            "arn:aws:logs:us-east-1:1:log-group:/aws/lambda/f:*",
            "arn:aws:iam::1:role/r",
        ] {
            assert_eq!(Arn::parse(arn).unwrap().to_string(), arn);
        }
    }

    #[test]
    fn the_resource_keeps_its_colons() {
        let logs = Arn::parse("arn:aws:logs:us-east-1:1:log-group:/aws/lambda/f:*").unwrap();
        assert_eq!(logs.service, "logs");
        assert_eq!(logs.resource, "log-group:/aws/lambda/f:*");
        let role = Arn::parse("arn:aws:iam::1:role/r").unwrap();
        assert_eq!((role.region, role.account), ("", "1"));
    }

    #[test]
    fn what_is_not_an_arn_is_named() {
        assert_eq!(
            Arn::parse("sqs:us-east-1"),
            Err(ArnError::NotAnArn {
                arn: "sqs:us-east-1".into()
            })
        );
        let err = Arn::parse("arn:aws:sqs:us-east-1:1").unwrap_err();
        assert_eq!(
            err,
            ArnError::TooShort {
                arn: "arn:aws:sqs:us-east-1:1".into(),
                parts: 5
            }
        );
        assert!(err.to_string().contains("5 of the 6 parts"), "{err}");
    }

    #[test]
    fn table_names_come_from_table_index_and_stream_arns() {
        let name = |arn| Arn::parse(arn).unwrap().table_name();
        assert_eq!(name("arn:aws:dynamodb:r:1:table/t"), Some("t"));
        assert_eq!(name("arn:aws:dynamodb:r:1:table/t/index/i"), Some("t"));
        assert_eq!(name("arn:aws:sqs:r:1:q"), None);
    }
}
