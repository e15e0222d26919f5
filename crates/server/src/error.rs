//! `ApiError`: every failure the API reports, in OpenAI's error shape
//! (`{"error": {"message", "type", "param", "code"}}`) with its HTTP status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hearth_worker::error::{AppError, ErrorKind};
use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// The request field at fault, as the client spelled it.
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    /// 400 for the field `param`.
    pub fn field(param: &str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: format!("{param}: {}", message.into()),
            param: Some(param.into()),
            code: Some("invalid_value"),
        }
    }

    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), param: None, code: Some(code) }
    }

    pub fn no_model() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "model_not_loaded",
            "no model is loaded in Hearth; open one in the app or pass --model",
        )
    }

    /// OpenAI's `type`, by status.
    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            405 | 413 | 400 | 422 => "invalid_request_error",
            429 => "rate_limit_error",
            503 => "service_unavailable",
            _ => "server_error",
        }
    }

    /// Anthropic's error shape, for the Messages API.
    pub fn anthropic_body(&self) -> Value {
        let kind = match self.status.as_u16() {
            400 | 422 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 => "overloaded_error",
            _ => "api_error",
        };
        json!({"type": "error", "error": {"type": kind, "message": self.message}})
    }

    /// This error as the Messages API answers it.
    pub fn anthropic(self) -> Response {
        (self.status, axum::Json(self.anthropic_body())).into_response()
    }

    /// The body, as the last event of a stream that already began.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind(), "param": self.param, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

impl From<AppError> for ApiError {
    fn from(e: AppError) -> Self {
        let (status, code) = match e.kind {
            ErrorKind::NoModel => return Self::no_model(),
            ErrorKind::PromptTooLong => (StatusCode::BAD_REQUEST, "context_length_exceeded"),
            ErrorKind::InvalidSettings => (StatusCode::BAD_REQUEST, "invalid_value"),
            ErrorKind::Busy => (StatusCode::TOO_MANY_REQUESTS, "busy"),
            ErrorKind::BadModel | ErrorKind::UnsupportedModel => (StatusCode::SERVICE_UNAVAILABLE, "model_not_loaded"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
        };
        Self::new(status, code, e.message)
    }
}
